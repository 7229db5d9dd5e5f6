"""Async checkpoints staged in the background while training goes on are exact: after several of them,
a run resumed from one continues bit for bit (real torchrun, gloo, real DCP files). torch's own
``DefaultStager`` behaves as on torch 2.11 in these runs (it closes its copier after every stage):
the trainer's saves must not depend on it."""

import json
import os
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.support.trainer.run import HERE, run_trainer, tiny_params

pytestmark = pytest.mark.slow


def _losses(tmp: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (tmp / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["kind"] == "train"}


def _tensors(ckpt: Path, tmp: Path) -> dict[str, torch.Tensor]:
    out = tmp / f"{ckpt.parent.parent.parent.name}.pt"
    dcp_to_torch_save(str(ckpt), str(out))
    flat = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(f"{prefix}.{key}", sub)
        elif isinstance(value, torch.Tensor):
            flat[prefix] = value

    walk("", torch.load(out, weights_only=False)["app"])
    return flat


def test_resume_after_several_async_saves_is_bit_exact(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [
        str(HERE / "torch_2_11_stager"), os.environ.get("PYTHONPATH")])))
    params = tiny_params(tmp_path / "full" / "out", max_steps=9,
                         checkpoint={"every_steps": 2, "keep_last": 5, "async_save": True, "export_hf": False},
                         logging={"eval_every_steps": None, "eval_max_batches": 1})
    full = run_trainer(tmp_path / "full", params)
    assert full.returncode == 0, full.stderr[-3000:]
    blocked = [line for line in full.stdout.splitlines() if line.startswith("checkpoint blocked training for")]
    assert len(blocked) == 4 and all("waiting for the copy to host memory" in line for line in blocked), blocked
    ckpts = tmp_path / "full" / "out" / "checkpoints"
    params["output_dir"] = str(tmp_path / "resumed" / "out")
    params["checkpoint"]["resume"] = str(ckpts / "step-00000006")
    resumed = run_trainer(tmp_path / "resumed", params)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step 6" in resumed.stdout
    before, after = _losses(tmp_path / "full"), _losses(tmp_path / "resumed")
    assert sorted(after) == [7, 8, 9] and all(after[s] == before[s] for s in after), (before, after)
    final_full = _tensors(ckpts / "step-00000009", tmp_path)
    final_resumed = _tensors(tmp_path / "resumed" / "out" / "checkpoints" / "step-00000009", tmp_path)
    assert final_full.keys() == final_resumed.keys() and any(".model." in k for k in final_full)
    for key, value in final_full.items():
        assert torch.equal(value, final_resumed[key]), key
