"""Models load at their real size: built on the meta device, each rank reads only its own shards from
the safetensors (real torchrun, gloo, real files)."""

import json
import struct
import subprocess
from pathlib import Path

import pytest
import torch

from tests.support.trainer.run import HERE, ROOT, torchrun_argv, trainer_env

pytestmark = pytest.mark.slow
WORKER = str(HERE / "load_worker.py")


def _load(tmp: Path, model_dir: Path, check: bool) -> list[dict]:
    out = tmp / "load"
    run = subprocess.run(torchrun_argv(2, WORKER, str(model_dir), str(out), "check" if check else "-"), cwd=ROOT,
                         env=trainer_env(tmp), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(2)]


def test_shards_hold_exactly_the_checkpoint_weights(tmp_path, tiny_model_dir):
    _load(tmp_path, tiny_model_dir, check=True)
    check = json.loads((tmp_path / "load.check.json").read_text())
    assert check == {"keys_match": True, "same": True, "num_keys": check["num_keys"]} and check["num_keys"] > 30


def _write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]]) -> int:
    """A real safetensors file written tensor by tensor (never the whole model in memory)."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * int(torch.tensor(shape).prod())
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for i, shape in enumerate(shapes.values()):
            f.write(torch.full(shape, float(i % 7) / 7, dtype=torch.float32).numpy().tobytes())
    return path.stat().st_size


def test_a_1gb_model_loads_with_one_copy_of_its_weights_on_the_host(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.model.loading import parameters_on_meta

    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=12,
                         num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=False)
    with parameters_on_meta():
        skeleton = LlamaForCausalLM(config)
    folder = tmp_path / "llama-1gb"
    folder.mkdir()
    config.save_pretrained(folder)
    size = _write_safetensors(folder / "model.safetensors", {n: tuple(p.shape) for n, p in skeleton.named_parameters()})
    assert 0.9e9 < size < 1.2e9
    ranks = _load(tmp_path, folder, check=False)
    assert sum(r["local_bytes"] for r in ranks) == pytest.approx(size, rel=0.01)  # every weight, once
    above_idle = sum(r["peak"] - r["idle"] for r in ranks)
    assert above_idle <= 1.3 * size, f"peak RSS above idle {above_idle / 1e9:.2f} GB for a {size / 1e9:.2f} GB model"
