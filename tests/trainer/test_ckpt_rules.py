"""The checkpoint rules both sides ask (``trainer/wire``), table-driven: whose a checkpoint is and what a run
may read, prune and delete (``ckpt_owner``); a checkpoint's bytes against the trainer's digests and the mark
that makes it not whole (``ckpt_digest``); why a checkpoint is not whole, in words (``ckpt_layout``)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from trainer.wire import ckpt_digest, ckpt_owner
from trainer.wire.ckpt_layout import BAD_MARK, CheckpointInfo, judge, list_checkpoints, wholeness
from trainer.wire.ckpt_owner import Lineage


def ck(step: int, run_id: str | None, complete: bool = True, name: str | None = None) -> CheckpointInfo:
    name = name or f"step-{step:08d}"
    return CheckpointInfo(step, f"/c/{name}", complete, 10, 0.0, run_id=run_id)


@pytest.mark.parametrize("lineage, writer, whose", [
    (Lineage.of("B", ["A"], "/srv/ckpt"), "B", "own"),
    (Lineage.of("B", ["A"], "/srv/ckpt"), "A", "continued"),
    (Lineage.of("B", ["A"], "/srv/ckpt"), "C", "other"),
    (Lineage.of("B", ["A"], "/srv/ckpt"), None, "other"),  # no recorded writer in a shared folder: nobody's
    (Lineage.of("B", [], "outputs"), None, "own"),  # ... in the run's own folder: the run's
    (Lineage.of("B", [], "~/out/$FSDP_TUI_RUN_ID"), None, "own"),
    (Lineage.of("B", [], "~/out/${FSDP_TUI_RUN_ID}/x"), "C", "other"),  # a copy of another run's: never its own
    (Lineage(None), None, "own"),  # a trainer run by hand owns what names no run
    (Lineage(None), "A", "other"),
    (Lineage.of("B", ["B", "A", "A", 3], "/x"), "A", "continued"),  # itself and junk left out of the lineage
])
def test_whose_a_checkpoint_is(lineage, writer, whose):
    assert lineage.whose(ck(1, writer)) == whose
    assert lineage.may_read(ck(1, writer)) == (whose != "other")


@pytest.mark.parametrize("output_dir, private", [
    ("outputs", True), ("a/b", True), ("/srv/ckpt", False), ("~/out", False), ("$SCRATCH/out", False),
    ("s3://b/x", False), ("~/out/$FSDP_TUI_RUN_ID", True), ("/o/${FSDP_TUI_RUN_ID}", True), ("", False), (None, False),
])
def test_a_folder_no_other_run_writes_into(output_dir, private):
    assert ckpt_owner.private_folder(output_dir) == private


FOLDER = [ck(50, "A"), ck(100, "A"), ck(150, "B"), ck(200, "B"), ck(250, "B", complete=False), ck(300, "B"),
          ck(310, "C"), ck(320, None)]


@pytest.mark.parametrize("lineage, keep_last, keep, pruned", [
    (Lineage.of("B", ["A"], "/f"), 1, (), [150, 200]),  # only B's own, never A's it resumed from, never C's
    (Lineage.of("B", ["A"], "/f"), 3, (), []),  # 150, 200, 300: three of its own
    (Lineage.of("B", ["A"], "/f"), 2, (), [150]),
    (Lineage.of("B", ["A"], "/f"), 1, ("step-00000150",), [200]),  # a copy brought to resume from stays
    (Lineage.of("B", ["A"], "/f"), None, (), []),
    (Lineage.of("A", [], "/f"), 1, (), [50]),
    (Lineage(None), 1, (), []),  # the only one that names no run is its newest
])
def test_keep_last_counts_and_prunes_the_runs_own_only(lineage, keep_last, keep, pruned):
    assert [c.step for c in ckpt_owner.to_prune(FOLDER, lineage, keep_last, keep)] == pruned


def test_a_run_deletes_only_its_own_and_never_its_safe_step():
    b = Lineage.of("B", ["A"], "/f")
    assert ckpt_owner.why_kept(FOLDER, FOLDER[0], b) == "step-00000050 is run A's: only its own run deletes it"
    assert "newest complete checkpoint" in ckpt_owner.why_kept(FOLDER, FOLDER[5], b)
    assert ckpt_owner.why_kept(FOLDER, FOLDER[4], b) == ""  # its own, not whole: it may go
    assert ckpt_owner.why_kept(FOLDER, FOLDER[2], b) == ""
    assert "not recorded as this run's" in ckpt_owner.why_kept(FOLDER, FOLDER[7], b)
    assert ckpt_owner.safe_step(FOLDER, b).step == 300 and ckpt_owner.safe_step(FOLDER, Lineage("D")) is None


@pytest.mark.parametrize("lineage, kwargs, step", [
    (Lineage.of("B", ["A"], "/f"), {}, 300),
    (Lineage.of("B", ["A"], "/f"), {"step": 100}, 100),  # the lineage's, when asked for
    (Lineage.of("B", ["A"], "/f"), {"step": 100, "own_only": True}, None),
    (Lineage.of("B", ["A"], "/f"), {"step": 250}, None),  # not whole
    (Lineage.of("D", [], "/f"), {}, None),  # a run that continues nobody reads nothing of others
    (Lineage.of("D", ["C"], "/f"), {}, 310),
    (Lineage.of("B", ["A"], "/f"), {"name": "step-00000150"}, 150),
])
def test_what_a_resume_may_read(lineage, kwargs, step):
    found = ckpt_owner.resume_from(FOLDER, lineage, **kwargs)
    assert (found.step if found else None) == step


@pytest.mark.parametrize("step, max_steps, left", [(60, 60, True), (61, 60, True), (59, 60, False),
                                                    (60, None, False), (60, 0, False)])
def test_nothing_left_to_train(step, max_steps, left):
    assert ckpt_owner.nothing_left(step, max_steps) == left


# -- the bytes ---------------------------------------------------------------------------------------------


def _saved(root, run_id: str = "A") -> str:
    folder = root / "step-00000002"
    folder.mkdir(parents=True)
    shards, sums = {"__0_0.distcp": 0, "__1_0.distcp": 1}, {}
    for name in shards:
        data = os.urandom(3000)
        (folder / name).write_bytes(data)
        sums[name] = hashlib.sha256(data).hexdigest()
    (folder / ".metadata").write_bytes(b"m")
    meta = {"step": 2, "run_id": run_id, "metadata_sha256": hashlib.sha256(b"m").hexdigest(),
            "shards": {n: {"bytes": 3000, "node": node, "sha256": sums[n]} for n, node in shards.items()}}
    (folder / "meta.json").write_text(json.dumps(meta))
    return str(folder)


def test_bytes_that_differ_are_found_marked_and_make_the_checkpoint_not_whole(tmp_path):
    path = _saved(tmp_path)
    meta = Path(path, "meta.json").read_text()
    assert ckpt_digest.verify(path, meta) == () and wholeness(path).complete
    with open(os.path.join(path, "__1_0.distcp"), "r+b") as f:  # 4 bytes overwritten, the size kept
        f.seek(100)
        f.write(b"\0\0\0\0")
    with open(os.path.join(path, ".metadata"), "wb") as f:
        f.write(b"M")
    differs = ckpt_digest.verify(path, meta)
    assert [(d.file, d.node) for d in differs] == [(".metadata", 0), ("__1_0.distcp", 1)]
    assert wholeness(path).complete  # sizes alone cannot tell: the digests do, and the mark says so after
    ckpt_digest.mark(path, differs)
    ckpt_digest.mark(path, differs[1:])  # marked twice: named once
    verdict = wholeness(path)
    assert not verdict.complete and verdict.differ == ((".metadata", 0), ("__1_0.distcp", 1))
    assert verdict.why_not().startswith("the bytes of .metadata (written on node 0); __1_0.distcp (written on node 1) "
                                        "differ from what the trainer wrote (SHA-256)")
    (listed,) = list_checkpoints(str(tmp_path))
    assert not listed.complete and listed.run_id == "A" and "__1_0.distcp (written on node 1)" in listed.why
    assert ckpt_digest.check(meta, "__0_0.distcp", "0" * 64) == ckpt_digest.Differs("__0_0.distcp", 0)
    assert ckpt_digest.check(meta, "other.file", "0" * 64) is None


def test_a_checkpoint_saved_before_digests_is_checked_by_its_sizes(tmp_path):
    path = _saved(tmp_path)
    meta = json.loads(Path(path, "meta.json").read_text())
    for entry in meta["shards"].values():
        del entry["sha256"]
    del meta["metadata_sha256"]
    assert ckpt_digest.verify(path, json.dumps(meta)) == ()


@pytest.mark.parametrize("shards, said", [
    ({"../../etc/passwd": {"bytes": 1, "node": 0}}, "it lists a shard named '../../etc/passwd', not a file name of this folder"),
    ({"a\x1b]2;x\x07": {"bytes": 1, "node": 0}}, "it lists a shard named 'a\\x1b]2;x\\x07', not a file name of this folder"),
    ({"a": {"bytes": -1, "node": 0}}, "shard a: its size or node is not a count"),
    ({"a": {"bytes": 1, "node": 0, "sha256": "zz"}}, "shard a: its sha256 is not a SHA-256 digest"),
    (["a"], "'shards' is not a table of files"),
])
def test_a_meta_json_that_cannot_be_trusted_says_why(shards, said):
    verdict = judge({".metadata": 1, "a": 1}, json.dumps({"step": 1, "shards": shards}))
    assert not verdict.complete and verdict.why_not() == f"its meta.json cannot be trusted: {said}"


def test_a_mark_that_names_nothing_still_marks(tmp_path):
    path = _saved(tmp_path)
    (tmp_path / "step-00000002" / BAD_MARK).write_text("not json")
    assert not wholeness(path).complete
    assert replace(ck(1, "A"), why="x").why == "x"


@pytest.mark.parametrize("shards, checked, unchecked", [
    ({"a": {"bytes": 1, "node": 0, "sha256": "0" * 64}}, True, False),
    ({"a": {"bytes": 1, "node": 0}}, False, True),  # listed without digests: its sizes were all that was checked
    (None, False, False),  # an older save with no shard list says nothing either way
])
def test_a_resumes_check_names_the_digests_its_bytes_matched(shards, checked, unchecked):
    from trainer.ckpt.resume_check import ResumeFacts, compare

    meta = {"run_id": "a", "resume": {"step": 4, "seed": 1}, **({"shards": shards} if shards else {})}
    verdict = compare(ResumeFacts.from_meta(meta), ResumeFacts(step=4, seed=1), None)
    assert ("shard digests" in verdict.checked) is checked and ("shard digests" in verdict.not_checked) is unchecked
