"""The training state a checkpoint keeps is a :class:`TrainState`, saved under the keys the trainer has
always written: a checkpoint saved in the old form (the plain dict the trainer kept, as users' folders
hold it) loads into the new type, and one the new type saves holds the same entries as the old form.
One process, no process group, real DCP files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.stateful import Stateful

from trainer.ckpt.checkpoint import AppState, Checkpointer
from trainer.data.position import DataPosition
from trainer.loop.state import TrainState
from trainer.parallel import Dist
from trainer.wire.config import CheckpointConfig

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

OLD = {"step": 12, "epoch": 1, "position": 5, "per_global": 8, "total_steps": 40}
"""The state the trainer kept as a dict, and saved so, before it had a type."""
OLD_STREAM = {**OLD, "stream_rows": 96, "stream": json.dumps({"slot": 96, "sources": [[0, 96]]})}


def _app(trainer: TrainState) -> AppState:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    return AppState(net, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), trainer)


def _old_form(old: dict) -> dict:
    """What the trainer saved when it kept its state as a plain dict: the same entries, ``trainer`` that dict."""
    return {**_app(TrainState()).state_dict(), "trainer": dict(old)}


def _keys(path: Path) -> set[str]:
    return set(FileSystemReader(str(path)).read_metadata().state_dict_metadata)


@pytest.mark.parametrize("old", [OLD, OLD_STREAM], ids=["rows", "stream"])
def test_a_checkpoint_saved_in_the_old_form_loads_into_the_train_state(tmp_path: Path, old: dict):
    dcp.save({"app": _old_form(old)}, checkpoint_id=str(tmp_path / "old"))
    state = TrainState.start(total_steps=20, per_global=4, streamed="stream" in old)
    resumed = _app(state)
    d = Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"))
    ckpt = Checkpointer(CheckpointConfig(), str(tmp_path / "out"), d, {"model_name": "m"})
    ckpt.load(resumed, tmp_path / "old")
    stream = (old["stream_rows"], old["stream"]) if "stream" in old else (0, None)
    assert state == TrainState(step=12, total_steps=40, data=DataPosition(1, 5, 8, *stream))
    assert ckpt.saved_step == 12 and resumed.step == 12


@pytest.mark.parametrize("old", [OLD, OLD_STREAM], ids=["rows", "stream"])
def test_the_train_state_saves_the_entries_the_old_form_saved(tmp_path: Path, old: dict):
    dcp.save({"app": _old_form(old)}, checkpoint_id=str(tmp_path / "old"))
    state = TrainState.start(total_steps=0, per_global=0, streamed="stream" in old)
    state.load_state_dict(dict(old))
    dcp.save({"app": _app(state)}, checkpoint_id=str(tmp_path / "new"))
    assert _keys(tmp_path / "new") == _keys(tmp_path / "old")
    assert {k for k in _keys(tmp_path / "new") if k.startswith("app.trainer.")} == {f"app.trainer.{k}" for k in old}
    back = dict.fromkeys(old, 0)  # a reader of the old form (a plain dict) reads the new checkpoint's values
    dcp.load({"app": {"trainer": back}}, checkpoint_id=str(tmp_path / "new"))
    assert back == old


def test_a_run_that_does_not_stream_keeps_no_stream_entries():
    assert isinstance(TrainState(), Stateful)
    assert set(TrainState.start(10, 8, streamed=False).state_dict()) == set(OLD)
    assert TrainState.start(10, 8, streamed=True).state_dict() == {**OLD, "step": 0, "epoch": 0, "position": 0,
                                                                   "total_steps": 10, "stream_rows": 0, "stream": ""}
