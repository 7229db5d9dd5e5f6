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


def _load(tmp: Path, *models: tuple[Path, str, bool]) -> list[list[dict]]:
    """Each ``(model_dir, name, check)`` loaded in turn by one torchrun launch: every rank's figures, per model."""
    argv = [a for folder, name, check in models for a in (str(folder), str(tmp / name), "check" if check else "-")]
    run = subprocess.run(torchrun_argv(2, WORKER, *argv), cwd=ROOT, env=trainer_env(tmp), capture_output=True,
                         text=True, timeout=300 * len(models))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return [[json.loads((tmp / f"{name}.rank{r}.json").read_text()) for r in range(2)] for _, name, _ in models]


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


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, tiny_model_dir) -> dict:
    """A 1 GB model, loaded first, and the tiny model, its shards checked against ``from_pretrained``'s
    weights: one launch for both."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.model.loading import parameters_on_meta

    tmp = tmp_path_factory.mktemp("loading")
    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=12,
                         num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=False)
    with parameters_on_meta():
        skeleton = LlamaForCausalLM(config)
    folder = tmp / "llama-1gb"
    folder.mkdir()
    config.save_pretrained(folder)
    size = _write_safetensors(folder / "model.safetensors", {n: tuple(p.shape) for n, p in skeleton.named_parameters()})
    big, _ = _load(tmp, (folder, "big", False), (tiny_model_dir, "tiny", True))
    return {"size": size, "big": big, "check": json.loads((tmp / "tiny.check.json").read_text())}


def test_shards_hold_exactly_the_checkpoint_weights(loaded):
    check = loaded["check"]
    assert check == {"keys_match": True, "same": True, "num_keys": check["num_keys"]} and check["num_keys"] > 30


def test_a_1gb_model_loads_with_one_copy_of_its_weights_on_the_host(loaded):
    size, ranks = loaded["size"], loaded["big"]
    assert 0.9e9 < size < 1.2e9
    assert sum(r["local_bytes"] for r in ranks) == pytest.approx(size, rel=0.01)  # every weight, once
    above_idle = sum(r["peak"] - r["idle"] for r in ranks)
    assert above_idle <= 1.3 * size, f"peak RSS above idle {above_idle / 1e9:.2f} GB for a {size / 1e9:.2f} GB model"
