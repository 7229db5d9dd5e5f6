"""The code snapshot's one walk: what ``validate`` reports before any upload is what the tar writer
refuses; an in-root link to a file ships as a copy; the agent's own unpacker takes the tar."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from launcher.backends.agent import files
from launcher.workload import snapshot
from launcher.workload.validate import validate_file


def _tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "util.py").write_text("X = 1\n")
    (root / "alias.py").symlink_to("train.py")             # in-root link to a file: a copy
    (root / "pkg" / "up.py").symlink_to("../train.py")     # the same, one folder down
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "junk").symlink_to("/etc")     # excluded: never looked at
    return root


def test_a_clean_tree_ships_links_to_files_as_copies_and_the_agent_unpacks_it(tmp_path):
    root = _tree(tmp_path / "code")
    found = snapshot.scan(root, [".git", "__pycache__"])
    assert found.refused == () and found.files == 4 and found.complete
    size, sha = snapshot.write_tar(root, ".", ["__pycache__"], tmp_path / "code.tar")
    with tarfile.open(tmp_path / "code.tar") as tar:
        assert all(m.isfile() or m.isdir() for m in tar.getmembers())
    node = tmp_path / "node"
    node.mkdir()
    files.put(str(node), "code.tar", 0, (tmp_path / "code.tar").read_bytes())
    assert files.unpack(str(node), "code.tar", size, sha, "code") == 4
    assert (node / "code" / "alias.py").read_text() == "print('hi')\n" and not (node / "code" / "alias.py").is_symlink()
    assert (node / "code" / "pkg" / "up.py").read_text() == "print('hi')\n"
    assert not (node / "code" / "__pycache__").exists()


def test_validate_names_every_entry_a_node_would_refuse_before_any_upload(tmp_path):
    root = _tree(tmp_path / "code")
    (root / "out.txt").symlink_to("/etc/hostname")
    (root / "data").symlink_to("pkg")
    (root / "gone").symlink_to("nowhere")
    os.mkfifo(root / "pipe")
    os.link(root / "train.py", root / "zz_hard.py")
    wl = tmp_path / "w.yaml"
    wl.write_text(f"experiment_name: s\ncommand: echo\ncode_source: {{type: snapshot, snapshot: {{root_path: {root}}}}}\n")
    errors = {p.message.split(":")[0]: p for p in validate_file(wl).errors}
    assert set(errors) == {"data", "gone", "out.txt", "pipe", "zz_hard.py"}
    assert all(p.path == "code_source.snapshot.root_path" and p.hint for p in errors.values())
    assert "link out of the snapshot (-> /etc/hostname)" in errors["out.txt"].message
    assert "hard link of 'train.py'" in errors["zz_hard.py"].message and "FIFO" in errors["pipe"].message
    with pytest.raises(snapshot.SnapshotRefused) as err:
        snapshot.write_tar(root, ".", ["__pycache__"], tmp_path / "code.tar")
    assert len(err.value.refused) == 5


def test_a_large_snapshot_warns_with_its_largest_files(tmp_path, monkeypatch):
    root = _tree(tmp_path / "code")
    (root / "weights.bin").write_bytes(b"w" * 3000)
    monkeypatch.setattr(snapshot, "LARGE_SNAPSHOT_BYTES", 2000)
    wl = tmp_path / "w.yaml"
    wl.write_text(f"experiment_name: s\ncommand: echo\ncode_source: {{type: snapshot, snapshot: {{root_path: {root}}}}}\n")
    [warning] = [p for p in validate_file(wl).problems if "the snapshot is" in p.message]
    assert warning.severity == "warning" and "largest: weights.bin" in warning.message and "exclude" in warning.hint
