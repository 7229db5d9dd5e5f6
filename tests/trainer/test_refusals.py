"""Runs the trainer cannot do are refused on every rank with the file or key, the reason and what to do,
never the trainer's traceback (torchrun prints its own for a failed child)."""

import json
import shutil

from tests.support.trainer.run import run_trainer, tiny_params


def test_resuming_another_models_checkpoint_names_the_folder_and_the_way_out(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    first = run_trainer(tmp_path / "a", tiny_params(out, max_steps=2, checkpoint={"every_steps": None}), nproc=1)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    other = tmp_path / "wider-mlp"
    shutil.copytree(tiny_model_dir, other)
    config = json.loads((other / "config.json").read_text())
    config["intermediate_size"] += 64
    (other / "config.json").write_text(json.dumps(config))

    second = run_trainer(tmp_path / "b", tiny_params(out, model_name=str(other), max_steps=4), nproc=2)
    text = second.stdout + second.stderr
    assert second.returncode != 0
    assert "cannot resume from this checkpoint" in text and "mlp" in text, text[-3000:]
    assert "saved for model 'builtin:tiny-llama'" in text
    assert "checkpoint.resume: never" in text
    # torchrun prints its own traceback for a failed child; the trainer's side has none
    assert "default_planner.py" not in text and "trainer/ckpt/checkpoint.py" not in text, text[-3000:]


def test_too_little_data_for_one_step_names_the_batch_size_and_the_way_out(tmp_path):
    data = tmp_path / "six.jsonl"
    with open("trainer/data/tiny_alpaca.jsonl") as f:
        data.write_text("".join(f.readlines()[:6]))
    out = run_trainer(tmp_path / "run", tiny_params(tmp_path / "out", dataset_name=str(data),
                                                    data={"packing": False}), nproc=2)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    # (one of the six rows is held out for evaluation)
    assert f"{data}: parameters.per_device_batch_size: 5 training rows cannot fill one global batch of 16" in text
    assert "a smaller per_device_batch_size or fewer processes" in text
    assert "trainer/data/rows.py" not in text and "trainer/__main__.py" not in text, text[-3000:]
