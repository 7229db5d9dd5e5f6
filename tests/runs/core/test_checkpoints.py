"""list_checkpoints on real folders: a checkpoint counts as complete only once DCP and meta.json are both written."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.wire.ckpt_layout import list_checkpoints
from trainer.wire.ckpt_owner import Lineage, why_kept


def _ckpt(root: Path, name: str, *, metadata: bool, meta: dict | str | None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "__0_0.distcp").write_bytes(b"x" * 100)
    if metadata:
        (d / ".metadata").write_bytes(b"m" * 10)
    if isinstance(meta, dict):
        (d / "meta.json").write_text(json.dumps(meta))
    elif isinstance(meta, str):
        (d / "meta.json").write_text(meta)
    return d


def test_complete_partial_corrupt_and_foreign_folders(tmp_path):
    root = tmp_path / "checkpoints"
    _ckpt(root, "step-20", metadata=True, meta={"step": 20})
    _ckpt(root, "step-5", metadata=True, meta={"step": 5})
    _ckpt(root, "step-30", metadata=False, meta=None)        # interrupted save: no .metadata
    _ckpt(root, "step-40", metadata=True, meta="{not json")  # torn meta.json
    (root / "step-abc").mkdir()
    (root / "notes.txt").write_text("x")

    got = list_checkpoints(root)
    assert [(c.step, c.complete) for c in got] == [(5, True), (20, True), (30, False), (40, False)]
    assert got[1].size_bytes == 100 + 10 + len(json.dumps({"step": 20}))
    assert got[0].to_dict()["path"] == str(root / "step-5")
    alone = Lineage(None)  # a trainer run by hand: the checkpoints that name no run are its own
    assert why_kept(got, got[1], alone) and not why_kept(got, got[0], alone) and not why_kept(got, got[2], alone)


def test_missing_folder_is_empty(tmp_path):
    assert list_checkpoints(tmp_path / "nope") == []
