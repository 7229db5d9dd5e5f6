"""The async checkpoint's host copy survives every save of a run and reuses its buffers, also where
torch's ``DefaultStager`` closes its copier after each stage (torch 2.11: simulated here on any torch)."""

import importlib.util
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from trainer.ckpt.stager import ReusingStager

SIMULATION = Path(__file__).with_name("torch_2_11_stager")


@pytest.fixture
def stager_as_in_torch_2_11(monkeypatch):
    monkeypatch.setattr(DefaultStager, "_stage", DefaultStager._stage)  # put back after the test
    spec = importlib.util.spec_from_file_location("torch_2_11_stager", SIMULATION / "sitecustomize.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _state(step: int) -> dict:
    torch.manual_seed(step)
    return {"model": {"w": torch.randn(64, 32), "b": torch.randn(32)}, "optim": {"state": {0: {
        "exp_avg": torch.randn(64, 32), "step": torch.tensor(float(step))}}, "param_groups": [{"lr": 0.1 * step}]},
        "trainer": {"step": step, "epoch": 0}, "rng": torch.get_rng_state()}


def _flat(value, prefix=""):
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _flat(sub, f"{prefix}.{key}")
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _flat(sub, f"{prefix}[{i}]")
    else:
        yield prefix, value


def test_a_run_long_stager_copies_three_saves_exactly_into_the_same_buffers(stager_as_in_torch_2_11):
    broken = DefaultStager(StagingOptions(use_pinned_memory=False, use_shared_memory=False,
                                          use_async_staging=True, use_non_blocking_copy=False))
    source = _state(1)
    broken.stage(source).result()
    with pytest.raises(KeyError):  # what a stager kept for the run met at its second save on 2.11
        broken.stage(source).result()
    broken.close()

    stager = ReusingStager(torch.device("cpu"))
    buffers = None
    try:
        for step in (1, 2, 3):
            fresh = _state(step)
            for (_, live), (_, value) in zip(_flat(source), _flat(fresh), strict=True):
                if isinstance(live, torch.Tensor):
                    live.copy_(value)  # the same tensors, new values: as a model between saves
            source["trainer"]["step"] = step
            source["optim"]["param_groups"][0]["lr"] = 0.1 * step
            copy = stager.stage(source).result()
            flat = dict(_flat(copy))
            for key, value in _flat(fresh):
                if isinstance(value, torch.Tensor):
                    assert torch.equal(flat[key], value) and flat[key].data_ptr() != dict(_flat(source))[key].data_ptr()
                else:
                    assert flat[key] == value, key
            ptrs = {k: v.data_ptr() for k, v in flat.items() if isinstance(v, torch.Tensor)}
            assert buffers is None or ptrs == buffers, "host buffers were allocated again"
            buffers = ptrs
    finally:
        stager.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_the_copy_is_pinned_reused_and_waits_for_the_compute_stream():
    device = torch.device("cuda", torch.cuda.device_count() - 1)  # not GPU 0: the thread must stay here
    torch.cuda.set_device(device)
    stager = ReusingStager(device)
    source = {"w": torch.zeros(4096, 1024, device=device)}
    try:
        ptrs = None
        for step in (1, 2, 3):
            source["w"].fill_(step)  # queued on the compute stream just before the save
            copy = stager.stage(source).result()
            assert copy["w"].is_pinned() and bool((copy["w"] == step).all())
            assert ptrs is None or copy["w"].data_ptr() == ptrs
            ptrs = copy["w"].data_ptr()
    finally:
        stager.close()
