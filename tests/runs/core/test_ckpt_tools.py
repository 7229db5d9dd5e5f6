"""What the checkpoint tools say, purely: ``show``'s resume suggestion and gathers,
a node's listing decoded (missing shards as data), the trainer's resume refusal of a split checkpoint."""

from __future__ import annotations

import json

import pytest

from launcher.backends.base import CheckpointListing
from launcher.cli.show import _gathers, _resumable
from launcher.notify.summary import CheckpointFact
from launcher.runs.core.gathers import Gather, GatherNote
from launcher.runs.core.safe_step import NONE_YET, SafeStep

RESUME = "fsdp-tui resume r1  (from its newest complete checkpoint)"


@pytest.mark.parametrize("safe, suggested", [
    (SafeStep(CheckpointFact("step-6", 6, 1.0)), True),
    (SafeStep(None, NONE_YET), False),
    (SafeStep(None, "cannot list the checkpoints on node 0: lost"), True),  # unknown: still offered
    (None, True),
])
def test_show_suggests_resume_only_with_a_complete_checkpoint(safe, suggested):
    steps = _resumable(["fsdp-tui logs r1 --tail 50", RESUME], safe, "r1")
    assert (RESUME in steps) == suggested
    if not suggested:
        assert steps[-1] == "no resume: run r1 has no complete checkpoint (fsdp-tui ckpt r1 lists them)"


def test_show_tells_the_gathers_and_the_step_that_is_not_whole():
    lines = _gathers([
        Gather("step-2", 2, True, None, "node 0 (gpu-a)", bytes=3 << 20, seconds=1.5),
        GatherNote("node 1 cannot dial node 0; copying through this machine", None),
        Gather("step-4", 4, True, None, "node 0 (gpu-a)", bytes=3 << 20, seconds=0.5),
        Gather("step-6", 6, False, None, "?", error="node 1 (gpu-b): lost: no connection for 120 s")])
    assert lines == ["2 checkpoints gathered into node 0 (gpu-a): 6.0 MiB in 2.0 s, off the training path",
                     "step-6 NOT whole: node 1 (gpu-b): lost: no connection for 120 s"]


def test_a_listing_from_a_node_keeps_only_well_formed_missing_shards():
    listing = CheckpointListing.from_wire(0, "node 0", "out", {"root": "/r", "exists": True, "checkpoints": [
        {"step": 6, "path": "/r/step-6", "complete": False, "saved": True, "size_bytes": 10, "mtime": 1.0,
         "missing": [["__2_0.distcp", 1], ["../../x", 1], ["a", -1], ["b"], "c", ["d\x1b[31m", 2]]}]})
    assert listing.checkpoints[0].missing == (("__2_0.distcp", 1),) and listing.checkpoints[0].saved


def test_the_trainer_refuses_a_split_checkpoint_naming_the_shards_and_their_node(tmp_path, monkeypatch):
    import torch

    from trainer.ckpt import checkpoint
    from trainer.ckpt.checkpoint import Checkpointer
    from trainer.parallel import Dist
    from trainer.wire.config import CheckpointConfig, SettingError

    step = tmp_path / "out" / "checkpoints" / "step-00000006"
    step.mkdir(parents=True)
    (step / ".metadata").write_bytes(b"m")
    (step / "__0_0.distcp").write_bytes(b"x" * 10)
    (step / "meta.json").write_text(json.dumps({"step": 6, "shards": {
        "__0_0.distcp": {"bytes": 10, "node": 0}, "__1_0.distcp": {"bytes": 10, "node": 1}}}))
    monkeypatch.setattr(checkpoint.dist, "broadcast_object_list", lambda objects, src: None)
    d = Dist(rank=0, world=2, local_rank=0, local_world=1, device=torch.device("cpu"))
    ckpt = Checkpointer(CheckpointConfig(resume=str(step)), str(tmp_path / "out"), d, {"model_name": "m"})
    with pytest.raises(SettingError) as err:
        ckpt.resume_path()
    assert str(err.value) == (
        f"parameters.checkpoint.resume: '{step}' is not a whole checkpoint: missing __1_0.distcp (1 shard) "
        "written on node 1 and not gathered here; they are in the same folder on node 1's own disk (the launcher "
        "gathers them after each save when the nodes do not share output_dir: fsdp-tui ckpt RUN says which "
        "checkpoints are whole)")
    auto = Checkpointer(CheckpointConfig(), str(tmp_path / "out"), d, {"model_name": "m"})
    assert auto.resume_path() is None  # never the newest of split ones


@pytest.mark.parametrize("recorded, claimed", [
    ("parameters: {lr: 1}\n", ["r1"]),                                           # a first resume of r1
    ("parameters: {checkpoint: {resume_runs: [r0, z]}}\n", ["r1", "r0", "z"]),  # r1 was a resume itself
    ("parameters: {checkpoint: {resume_runs: [r1, r0]}}\n", ["r1", "r0"]),      # r1 named once
    ("parameters: {checkpoint: {resume_runs: 5}}\n", ["r1"]),                    # odd records add nothing
    ("parameters: [", ["r1"]),
    ("", ["r1"]),
])
def test_a_resume_claims_the_run_and_the_runs_it_continued(recorded, claimed):
    from launcher.runs.core.checkpoints import resume_runs_override

    override = resume_runs_override("r1", recorded)
    assert (override.key, override.value) == ("parameters.checkpoint.resume_runs", claimed)
