"""Runs the trainer cannot do are refused on every rank with the file or key, the reason and what to do,
never the trainer's traceback (torchrun prints its own for a failed child).

The module's two-rank refusals (a checkpoint of another model, too little data) run one after the other in
one torchrun (``refused``): each is the trainer's own entry in a folder of its own, its refusal written as
``python -m trainer`` writes it, with the output and exit code of its own, at the cost of one start of the
ranks. An exception that is not a refusal would end those processes with its traceback in the run's output."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.trainer.run import run_trainer, run_trainers, tiny_params

pytestmark = pytest.mark.slow  # torchrun, two ranks


@pytest.fixture(scope="module")
def refused(tmp_path_factory, tiny_model_dir) -> dict:
    """The one-rank run whose checkpoint a wider model's run finds (``first``), the six-row data file
    (``data_file``), and the two refused two-rank runs' results (``resume``, ``data``)."""
    tmp = tmp_path_factory.mktemp("refusals")
    out = tmp / "resume" / "out"
    first = run_trainer(tmp / "resume" / "a", tiny_params(out, max_steps=2, checkpoint={"every_steps": None}), nproc=1)
    other = tmp / "resume" / "wider-mlp"
    shutil.copytree(tiny_model_dir, other)
    config = json.loads((other / "config.json").read_text())
    config["intermediate_size"] += 64
    (other / "config.json").write_text(json.dumps(config))

    data = tmp / "data" / "six.jsonl"
    data.parent.mkdir()
    with open("trainer/data/tiny_alpaca.jsonl") as f:
        data.write_text("".join(f.readlines()[:6]))
    runs: dict[str, tuple[Path, dict, None]] = {
        "data": (tmp / "data" / "run", tiny_params(tmp / "data" / "out", dataset_name=str(data),
                                                   data={"packing": False}), None),
        "resume": (tmp / "resume" / "b", tiny_params(out, model_name=str(other), max_steps=4), None),
    }
    outs = run_trainers(list(runs.values()), nproc=2)
    return {"first": first, "data_file": data, **dict(zip(runs, outs, strict=True))}


def test_resuming_another_models_checkpoint_names_the_folder_and_the_way_out(refused):
    first = refused["first"]
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]

    second: subprocess.CompletedProcess = refused["resume"]
    text = second.stdout + second.stderr
    assert second.returncode != 0
    assert "cannot resume from this checkpoint" in text and "mlp" in text, text[-3000:]
    assert "saved for model 'builtin:tiny-llama'" in text
    assert "checkpoint.resume: never" in text
    # the trainer's side has no traceback (under python -m trainer, torchrun prints its own for the failed child)
    assert "default_planner.py" not in text and "trainer/ckpt/checkpoint.py" not in text, text[-3000:]


def test_too_little_data_for_one_step_names_the_batch_size_and_the_way_out(refused):
    data = refused["data_file"]
    out: subprocess.CompletedProcess = refused["data"]
    text = out.stdout + out.stderr
    assert out.returncode != 0
    # (one of the six rows is held out for evaluation)
    assert f"{data}: parameters.per_device_batch_size: 5 training rows cannot fill one global batch of 16" in text
    assert "a smaller per_device_batch_size or fewer processes" in text
    assert "trainer/data/rows.py" not in text and "trainer/__main__.py" not in text, text[-3000:]
