"""A BLOOM-shaped model (ALiBi, no position ids, no sdpa in transformers) trains with the defaults, and
asking it to pack is refused before anything runs, with the key and its line named."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.trainer.run import ROOT, run_trainer, trainer_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bloom_dir(tmp_path_factory, tiny_model_dir) -> Path:
    from transformers import AutoTokenizer, BloomConfig, BloomForCausalLM

    folder = tmp_path_factory.mktemp("tiny-bloom")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = BloomConfig(vocab_size=len(tok), hidden_size=32, n_layer=2, n_head=2,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    BloomForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _params(bloom_dir: Path, out: Path, **over) -> dict:
    return {"model_name": str(bloom_dir), "dataset_name": "builtin:tiny-alpaca", "output_dir": str(out),
            "max_seq_len": 96, "per_device_batch_size": 4, "learning_rate": 0.003, "max_steps": 4,
            "logging": {"eval_max_batches": 1}, "checkpoint": {"save_final": False, "export_hf": False}, **over}


def test_trains_with_default_parameters(tmp_path, bloom_dir):
    out = run_trainer(tmp_path, _params(bloom_dir, tmp_path / "out"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "attention: eager (the model has no sdpa implementation)" in out.stdout
    assert out.stdout.count("packing: off (BLOOM uses ALiBi without position ids") == 1
    losses = [json.loads(line)["loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "train"]
    assert len(losses) == 4 and all(0 < loss < 20 for loss in losses)


def test_validate_refuses_packing_naming_its_line(tmp_path, bloom_dir):
    workload = tmp_path / "bloom.yaml"
    text = yaml.safe_dump({
        "experiment_name": "bloom-packed",
        "compute": {"accelerator_type": "CPU", "procs_per_node": 2, "num_accelerators": 2},
        "parameters": _params(bloom_dir, tmp_path / "out", data={"packing": True}),
    }, sort_keys=False)
    workload.write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.strip().startswith("packing:"))
    out = subprocess.run([str(Path(sys.executable).with_name("fsdp-tui")), "validate", str(workload)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    text_out = out.stdout + out.stderr
    assert out.returncode != 0, text_out
    assert f"{workload.name}:{line}:" in text_out and "parameters.data.packing" in text_out, text_out
    assert "ALiBi" in text_out and "Traceback" not in text_out


def test_trainer_refuses_packing_before_starting(tmp_path, bloom_dir):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(_params(bloom_dir, tmp_path / "out", data={"packing": True})))
    out = subprocess.run([sys.executable, "-m", "trainer", str(params)], cwd=tmp_path, env=trainer_env(tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "parameters.data.packing: BLOOM uses ALiBi" in out.stderr and "Traceback" not in out.stderr
