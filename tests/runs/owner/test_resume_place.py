"""Where the nodes that go on after a swap find their checkpoint: each "node"'s disk a folder here, read
and written through the agent's own checkpoint functions (as tests/runs/owner/test_gather_units.py)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

from launcher.backends.base import CheckpointListing
from launcher.backends.ckpt_files import HereCheckpointFiles
from launcher.runs.owner.resume_place import place_for_resume
from launcher.workload.ckpt_place import CheckpointPlace, Holder
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from trainer.wire.ckpt_layout import list_checkpoints


class Disk(HereCheckpointFiles):
    def __init__(self, label: str) -> None:
        self.label = label


class Nodes:
    """The part of a backend :func:`place_for_resume` asks: the new plan, each node's files, a listing."""

    def __init__(self, plan, labels: list[str]) -> None:
        self.plan, self.disks = plan, [Disk(x) for x in labels]

    def checkpoint_files(self, rank: int) -> Disk:
        return self.disks[rank]

    async def checkpoints(self, output_dir: str, rank: int = 0, root: str | None = None) -> CheckpointListing:
        return await self.disks[rank].listing(root or output_dir)


def whole(root: Path, step: int) -> None:
    """A whole checkpoint as the trainer leaves it (one shard, listed in ``meta.json``)."""
    folder = root / f"step-{step:08d}"
    folder.mkdir(parents=True)
    (folder / "__0_0.distcp").write_bytes(bytes([step]) * 64)
    (folder / ".metadata").write_bytes(b"m" * 5)
    (folder / "meta.json").write_text(json.dumps({"step": step, "shards": {"__0_0.distcp": {"bytes": 64, "node": 0}}}))


def plans(tmp_path: Path, old_roots: list[Path], new_roots: list[Path], kind: str = "per_node", holder=None):
    result = validate_text("experiment_name: e\ncompute: {hosts: [h0, h1, h2]}\ncommand: run\n"
                           "parameters: {output_dir: outputs}\n", "w.yaml")
    base = build_plan(result.workload, run_id="r", node_root="/n")
    old = replace(base, ckpt_place=CheckpointPlace(kind, "outputs", tuple(map(str, old_roots)), (True, False, False),
                                                   holder or Holder(0, str(old_roots[0]))))
    new = replace(base, ckpt_place=CheckpointPlace(kind, "outputs", tuple(map(str, new_roots)), (True, False, False),
                                                   Holder(0, str(new_roots[0]))))
    return old, new


def steps(root: Path) -> list[tuple[int, bool]]:
    return [(c.step, c.complete) for c in list_checkpoints(str(root))]


def run(old, new, old_rank, failed, tmp_path, labels=("node 0 (h0)", "node 1 (s0)", "node 2 (h2)")):
    return asyncio.run(place_for_resume(old, Nodes(new, list(labels)), old_rank, failed, tmp_path, lambda: Disk("here")))


def test_node_0_kept_its_folder_the_newest_whole_one_there_is_used_as_it_is(tmp_path):
    roots = [tmp_path / f"n{i}" for i in range(3)]
    whole(roots[0], 5)
    whole(roots[0], 10)
    old, new = plans(tmp_path, roots, [roots[0], tmp_path / "n1.1", roots[2]])
    point = run(old, new, {0: 0, 1: None, 2: 2}, 1, tmp_path)
    assert (point.step, point.note) == (10, "step-00000010 in node 0's folder")


def test_node_0_replaced_on_a_shared_disk_its_newest_whole_one_is_brought_to_the_spares_folder(tmp_path):
    roots = [tmp_path / f"n{i}" for i in range(3)]
    whole(roots[0], 10)
    (roots[1] / "step-00000015").mkdir(parents=True)  # a survivor's leftover of a save never made whole
    spare = tmp_path / "n0.1"
    old, new = plans(tmp_path, roots, [spare, roots[1], roots[2]])
    point = run(old, new, {0: None, 1: 1, 2: 2}, 0, tmp_path)
    assert point.step == 10 and point.note.startswith("step-00000010 brought from node 0 (h0)") and \
        point.note.endswith("to node 0")
    assert steps(spare) == [(10, True)]


def test_a_checkpoint_whole_only_on_the_failed_nodes_own_disk_is_said_lost_and_the_run_starts_over(tmp_path):
    roots = [tmp_path / f"n{i}" for i in range(3)]  # node 0's disk went with it: nothing there to read
    (tmp_path / "gathers.jsonl").write_text(json.dumps({"name": "step-00000010", "step": 10, "ok": True}) + "\n")
    old, new = plans(tmp_path, roots, [tmp_path / "n0.1", roots[1], roots[2]])
    point = run(old, new, {0: None, 1: 1, 2: 2}, 0, tmp_path)
    assert point.step is None
    assert point.note == ("no whole checkpoint is left on the nodes that go on: the run starts again from step 0; "
                          "step 10 was whole only on node 0 (h0)'s disk, lost with it")


def test_gathered_here_the_newest_whole_copy_goes_to_the_new_node_0(tmp_path):
    roots = [tmp_path / f"n{i}" for i in range(3)]
    here = tmp_path / "here"
    whole(here, 5)
    old, new = plans(tmp_path, roots, [tmp_path / "n0.1", roots[1], roots[2]], holder=Holder(None, str(here)))
    point = run(old, new, {0: None, 1: 1, 2: 2}, 0, tmp_path)
    assert point.step == 5 and "brought from here" in point.note
    assert steps(tmp_path / "n0.1") == [(5, True)]


def test_in_a_bucket_every_node_reads_it_and_nothing_moves(tmp_path):
    bucket = tmp_path / "bucket"
    whole(bucket, 20)
    old, new = plans(tmp_path, [bucket], [bucket], kind="bucket")
    new = replace(new, ckpt_place=CheckpointPlace("bucket", str(bucket), (str(bucket),)))
    new = replace(new, workload=new.workload.model_copy(update={"parameters": {"output_dir": str(bucket)}}))
    point = run(old, new, {0: None, 1: 1, 2: 2}, 0, tmp_path)
    assert (point.step, point.note) == (20, f"from the bucket {bucket}")
