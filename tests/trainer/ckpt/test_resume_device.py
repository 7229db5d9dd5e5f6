"""A checkpoint saved on CPU (no CUDA generator in it) resumes where CUDA is available: the state it
loads into does not ask for what the checkpoint lacks. One process, no process group, real DCP files;
the GPU is mocked (torch.cuda's availability and generator), no GPU here."""

from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from trainer.ckpt.checkpoint import AppState, Checkpointer
from trainer.loop.state import TrainState
from trainer.parallel import Dist
from trainer.wire.config import CheckpointConfig


def _app(seed: int) -> AppState:
    torch.manual_seed(seed)
    net = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    net(torch.randn(2, 4)).sum().backward()
    opt.step()
    return AppState(net, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), TrainState(step=seed))


def test_a_cpu_checkpoint_resumes_where_cuda_is_available(tmp_path: Path, monkeypatch):
    saved = _app(7)
    dcp.save({"app": saved}, checkpoint_id=str(tmp_path / "step-7"))
    resumed = _app(1)  # (its optimiser step would ask a CUDA build's driver, were CUDA said to be there)
    set_cuda = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda: torch.zeros(16, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", set_cuda.append)
    assert "cuda_rng" in resumed.state_dict()  # a GPU run saves its generator
    d = Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"))
    Checkpointer(CheckpointConfig(), str(tmp_path / "out"), d, {"model_name": "m"}).load(resumed, tmp_path / "step-7")
    assert resumed.trainer.step == 7 and set_cuda == []
    assert torch.equal(resumed.model.weight, saved.model.weight)
    assert "cuda_rng" in resumed.state_dict()  # and the run's own saves keep it
