"""A checkpoint that does not fit the run (another model in the same output folder) is refused with the
folder, the reason and what to do, on every rank, never a traceback."""

import json
import shutil

from tests.trainer.conftest import run_trainer, tiny_params


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
    assert "default_planner.py" not in text and "trainer/checkpoint.py" not in text, text[-3000:]
