"""Who writes what into a checkpoint, and from which GPU. The writer's device hook runs with a mocked
GPU (``torch.cuda.set_device`` records its calls: no GPU here); the share of replicated state each
rank stages is checked on real FSDP2 models under torchrun (gloo, real DCP files)."""

import json
import subprocess
import threading

import pytest
import torch
import torch.distributed.checkpoint as dcp

from tests.support.trainer.run import HERE, ROOT, torchrun_argv, trainer_env
from trainer.ckpt.checkpoint import Checkpointer
from trainer.ckpt.write import RankDeviceWriter, tensor_bytes, writer_share
from trainer.parallel import Dist
from trainer.wire.config import CheckpointConfig

WORKER = str(HERE / "share_worker.py")


def test_an_async_save_writes_from_a_thread_set_to_the_ranks_gpu_and_loads_back(tmp_path, monkeypatch):
    calls: list[tuple[torch.device, str]] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda dev: calls.append((dev, threading.current_thread().name)))
    rank3 = Dist(rank=3, world=4, local_rank=3, local_world=4, device=torch.device("cuda", 3))
    writer = Checkpointer(CheckpointConfig(), str(tmp_path), rank3, {}).writer(tmp_path / "ck")
    assert isinstance(writer, RankDeviceWriter)
    torch.manual_seed(0)
    saved = {"w": torch.randn(64, 32), "step": torch.tensor(7.0), "lr": 0.25}
    future = dcp.async_save(saved, checkpoint_id=str(tmp_path / "ck"), storage_writer=writer)
    future.result()
    main = threading.current_thread().name
    assert calls and all(dev == torch.device("cuda", 3) and name != main for dev, name in calls), calls
    loaded = {"w": torch.zeros(64, 32), "step": torch.tensor(0.0), "lr": 0.0}
    dcp.load(loaded, checkpoint_id=str(tmp_path / "ck"))
    assert torch.equal(loaded["w"], saved["w"]) and loaded["step"].item() == 7.0 and loaded["lr"] == 0.25


def _plain_state() -> dict:
    return {"model": {f"layer{i}.weight": torch.zeros(10 * (i + 1)) for i in range(6)},
            "optim": {"state": {"layer0.weight": {"step": torch.tensor(1.0), "exp_avg": torch.zeros(10)}},
                      "param_groups": [{"lr": 0.1, "params": ["layer0.weight"]}]},
            "trainer": {"step": 3}}


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_each_replicated_tensor_is_written_by_exactly_one_rank_and_the_shares_balance(world):
    state = _plain_state()
    shares = [writer_share(state, rank, world) for rank in range(world)]
    total = tensor_bytes(state)
    assert sum(tensor_bytes(s) for s in shares) == total
    largest = max(t.numel() * t.element_size() for t in state["model"].values())
    assert max(tensor_bytes(s) for s in shares) <= total / world + largest
    for share in shares:  # what is not a tensor is written by DCP once, from any rank: every rank keeps it
        assert share["trainer"] == {"step": 3} and share["optim"]["param_groups"] == state["optim"]["param_groups"]
    names = [set(s["model"]) for s in shares]
    assert set().union(*names) == set(state["model"]) and sum(len(n) for n in names) == len(state["model"])


@pytest.mark.slow
def test_replicated_models_stage_a_share_per_rank_and_load_back_exactly(tmp_path, tiny_model_dir):
    run = subprocess.run(torchrun_argv(2, WORKER, str(tiny_model_dir), str(tmp_path)), cwd=ROOT,
                         env=trainer_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for mode in ("no_shard", "replicate"):
        staged = [r[mode]["staged"] for r in ranks]
        total, largest = ranks[0][mode]["total"], ranks[0][mode]["largest"]
        assert total > 1_000_000 and sum(staged) == total, (mode, staged, total)
        assert max(staged) <= total / 2 + largest, (mode, staged, total, largest)
        assert all(r[mode]["exact"] for r in ranks), (mode, ranks)
