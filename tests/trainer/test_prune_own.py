"""``keep_last`` prunes only the run's own checkpoints: never one another run wrote into a shared
``output_dir``, never one this run resumed from (each checkpoint's ``meta.json`` names its run)."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.ckpt.checkpoint import Checkpointer
from trainer.ckpt.store import open_store
from trainer.wire import ckpt_layout, ckpt_owner
from trainer.wire.config import CheckpointConfig


def _checkpoint(root: Path, step: int, run_id: str | None) -> None:
    folder = root / ckpt_layout.step_name(step)
    folder.mkdir(parents=True)
    (folder / ckpt_layout.DCP_META).write_bytes(b"x")
    meta = {"step": step} if run_id is None else {"step": step, "run_id": run_id}
    (folder / ckpt_layout.META).write_text(json.dumps(meta))


WRITERS = ((2, "other"), (4, "mine"), (6, "other"), (8, "mine"), (10, "mine"), (12, None), (14, None))


def _pruned_by(run_id: str | None, tmp_path: Path, keep_last: int) -> list[int]:
    root = tmp_path / "out" / "checkpoints"
    for step, writer in WRITERS:
        _checkpoint(root, step, writer)
    ckpt = Checkpointer.__new__(Checkpointer)  # no process group: only the prune is asked of it
    ckpt.cfg, ckpt.root, ckpt.run_id = CheckpointConfig(keep_last=keep_last), root, run_id
    ckpt.lineage = ckpt_owner.Lineage.of(run_id, [])
    ckpt.store = open_store(str(root))
    ckpt._prune()
    return [c.step for c in ckpt_layout.list_checkpoints(str(root))]


def test_keep_last_prunes_only_the_runs_own_checkpoints(tmp_path):
    assert _pruned_by("mine", tmp_path, keep_last=1) == [2, 6, 10, 12, 14]
    assert ckpt_layout.written_by(str(tmp_path / "out" / "checkpoints" / "step-00000006")) == "other"


def test_outside_fsdp_tui_a_job_prunes_the_checkpoints_that_name_no_run(tmp_path):
    assert _pruned_by(None, tmp_path, keep_last=1) == [2, 4, 6, 8, 10, 14]
