"""What a dry run and the editor say of a plan's memory (``launcher.workload.fit`` predicts it,
``launcher.present.plan_preview`` says it), before anything runs:
the model's ``config.json`` alone (a local folder, or a hub id in the Hugging Face cache; no weights, no
torch), each rank's need against the card ``compute.accelerator_type`` names, and what would make it fit.
Table-driven over plans; one ``run --dry-run`` of the real CLI says the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.present.plan_preview import fit_lines
from launcher.workload.fit import plan_fit
from launcher.workload.load import plan_file
from tests.support.cli import cli

LLAMA_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "max_position_embeddings": 131072, "tie_word_embeddings": False}
"""Llama-3.1-8B's shape (8.03B parameters), as its config.json says it."""
QWEN_05B = {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
            "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
            "max_position_embeddings": 32768, "tie_word_embeddings": True}
"""Qwen2.5-0.5B's shape: a hub id read from the Hugging Face cache."""


def _workload(tmp_path: Path, model: str, *, gpu: str = "GPU_8xH100", nodes: int = 2, seq: int = 8192,
              batch: int = 1, extra: str = "") -> Path:
    hosts = ", ".join(f"gpu-node-{i}" for i in range(nodes))
    path = tmp_path / "w.yaml"
    path.write_text(f"experiment_name: fit\ncompute:\n  num_accelerators: {8 * nodes}\n  accelerator_type: {gpu}\n"
                    f"  hosts: [{hosts}]\nparameters:\n  model_name: {model}\n  dataset_name: builtin:tiny-alpaca\n"
                    f"  output_dir: /tmp/out\n  max_seq_len: {seq}\n  per_device_batch_size: {batch}\n"
                    f"  max_steps: 10\n{extra}")
    return path


@pytest.fixture
def models(tmp_path, monkeypatch) -> Path:
    """``./llama8b`` beside the workload; ``Qwen/Qwen2.5-0.5B`` in a Hugging Face cache of its own."""
    (tmp_path / "llama8b").mkdir()
    (tmp_path / "llama8b" / "config.json").write_text(json.dumps(LLAMA_8B))
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(QWEN_05B))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path


def _said(home: Path, path: Path) -> str:
    planned = plan_file(path, home=home)
    assert planned.plan is not None, [p.format() for p in planned.problems]
    return "\n".join(fit_lines(plan_fit(planned.plan), file=path.name))


@pytest.mark.parametrize(("model", "extra", "says", "never"), [
    # 8B unsharded at 8k tokens: weights, gradients and Adam state whole on every rank
    ("./llama8b", "  fsdp: {sharding: no_shard}\n",
     ["(no_shard, 16 ranks)", "does not fit: ", "of 79.6 GiB (H100, from compute.accelerator_type)",
      "try fsdp.sharding: full_shard"], ["  fits: "]),
    # the same sharded over 16 with every block's activations recomputed
    ("./llama8b", "  fsdp: {sharding: full_shard}\n  model: {activation_checkpointing: full}\n",
     ["(full_shard, 16 ranks)", "  fits: "], ["does not fit", "try "]),
    # auto: as the trainer will choose it, by the same figure (too big whole: sharded)
    ("./llama8b", "", ["(full_shard (auto's choice), 16 ranks)"], []),
    # a small hub model stays whole under auto (nothing gained by sharding it)
    ("Qwen/Qwen2.5-0.5B", "", ["(no_shard (auto's choice), 16 ranks)", "  fits: "], ["does not fit"]),
    # LoRA on the frozen 8B: the adapters alone train
    ("./llama8b", "  fsdp: {sharding: no_shard}\n  model: {activation_checkpointing: full}\n"
                  "  lora: {r: 16, target_modules: all-linear}\n", ["(no_shard, 16 ranks)", "  fits: "], ["does not fit"]),
    # a model whose config.json is not here: says how to get it, predicts nothing
    ("meta-llama/Not-Cached-7B", "", ["memory: not predicted (meta-llama/Not-Cached-7B's config.json is not on this "
                                       "machine: `huggingface-cli download meta-llama/Not-Cached-7B config.json`"], ["GiB"]),
])
def test_a_plan_s_memory_from_its_config_alone(home, models, model, extra, says, never):
    text = _said(home, _workload(models, model, extra=extra))
    for words in says:
        assert words in text, text
    for words in never:
        assert words not in text, text


def test_a_card_s_memory_decides_and_what_would_fit_is_named(home, models):
    sharded = "  fsdp: {sharding: full_shard}\n"
    assert "  fits: " in _said(home, _workload(models, "./llama8b", extra=sharded, seq=2048, batch=1))  # H100
    small = _said(home, _workload(models, "./llama8b", gpu="GPU_8xL40S", extra=sharded, seq=4096, batch=4))
    assert "does not fit: " in small and "(L40S, from compute.accelerator_type)" in small, small
    assert "  try model.activation_checkpointing: full (~" in small, small
    applied = sharded + "  model: {activation_checkpointing: full}\n"
    assert "  fits: " in _said(home, _workload(models, "./llama8b", gpu="GPU_8xL40S", extra=applied, seq=4096, batch=4))


def test_a_command_of_one_s_own_is_not_predicted(home, tmp_path):
    path = tmp_path / "own.yaml"
    path.write_text("experiment_name: own\ncompute:\n  accelerator_type: CPU\n  procs_per_node: 1\ncommand: echo hi\n")
    assert _said(home, path) == "memory: not predicted (a command of your own: its model is not known here)"


def test_the_dry_run_says_it(home, models):
    path = _workload(models, "./llama8b", extra="  fsdp: {sharding: no_shard}\n")
    out = cli(home, "run", str(path), "--dry-run", "--set", "parameters.model.activation_checkpointing=full")
    assert out.returncode == 0, out.stderr
    memory = out.stdout[out.stdout.index("\nmemory: "):]
    assert "(no_shard, 16 ranks)" in memory and "does not fit: " in memory and "try fsdp.sharding: full_shard" in memory
    assert "estimate: " in memory  # the estimate's block follows the memory's
