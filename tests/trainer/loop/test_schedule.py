"""The learning rate logged is the one the step used, and resuming on another world size continues the
same LR curve over the data (real torchrun, gloo)."""

import json
from pathlib import Path

import pytest

from tests.support.trainer.run import run_trainer, tiny_params

pytestmark = pytest.mark.slow


def _lrs(tmp: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (tmp / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["lr"] for r in records if r["kind"] == "train"}


def test_resume_on_another_world_size_keeps_the_lr_curve(tmp_path, tiny_model_dir):
    # 64 unpacked rows, one epoch: 8 steps of 2 x 4 rows on two ranks, 16 steps of 4 rows on one.
    params = tiny_params(tmp_path / "two" / "out", max_steps=None, num_epochs=1, per_device_batch_size=4,
                         data={"packing": False, "max_examples": 64, "eval_fraction": 0.0},
                         optim={"warmup_steps": 0, "schedule": "cosine"},
                         logging={"eval_every_steps": None},
                         checkpoint={"every_steps": 4, "keep_last": 3, "save_final": False, "export_hf": False})
    del params["max_steps"]
    two = run_trainer(tmp_path / "two", params, nproc=2)
    assert two.returncode == 0, two.stderr[-3000:]
    lr_two = _lrs(tmp_path / "two")
    assert sorted(lr_two) == list(range(1, 9))
    assert lr_two[1] == pytest.approx(params["learning_rate"])  # the LR step 1 used, not step 2's

    params["output_dir"] = str(tmp_path / "one" / "out")
    params["checkpoint"]["resume"] = str(tmp_path / "two" / "out" / "checkpoints" / "step-00000004")
    one = run_trainer(tmp_path / "one", params, nproc=1)
    assert one.returncode == 0, one.stderr[-3000:]
    assert "at step 8" in one.stdout  # half the data done: step 8 of 16
    lr_one = _lrs(tmp_path / "one")
    assert sorted(lr_one) == list(range(9, 17))
    for step in range(5, 9):  # two-rank step k starts where one-rank step 2k-1 does
        assert lr_one[2 * step - 1] == pytest.approx(lr_two[step], rel=1e-9), step
