"""A mixture-of-experts model without sdpa (a tiny GPT-OSS: eager attention with sinks, alternating
sliding-window and full layers, a router whose published config leaves its load-balancing loss off) trains
with that loss when ``model.router_aux_loss`` asks, under real torchrun (2 ranks, packed rows), logs it beside
the loss, decays weights but not biases and norms, and its
checkpoint exports through the node's export (what ``fsdp-tui export`` and the checkpoints screen run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tests.support.trainer.run import ROOT, run_trainer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def oss_dir(tmp_path_factory, tiny_model_dir) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("tiny-gpt-oss")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = AutoConfig.for_model(
        "gpt_oss", vocab_size=len(tok), hidden_size=32, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], num_local_experts=4, num_experts_per_tok=2,
        output_router_logits=False, router_aux_loss_coef=0.02, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_trains_with_its_router_loss_and_exports_without_sdpa(tmp_path, oss_dir):
    from launcher.backends.agent import checkpoints

    out_dir = tmp_path / "out"
    params = {"model_name": str(oss_dir), "dataset_name": "builtin:tiny-alpaca", "output_dir": str(out_dir),
              "max_seq_len": 64, "per_device_batch_size": 4, "learning_rate": 0.003, "max_steps": 3,
              "optim": {"weight_decay": 0.1}, "model": {"router_aux_loss": True}, "data": {"max_examples": 64}, "logging": {"eval_max_batches": 1},
              "checkpoint": {"export_hf": False}}
    run = run_trainer(tmp_path, params)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-4000:]
    assert "attention: eager (the model has no sdpa implementation)" in said
    assert "router aux loss: on (0.02 x the load-balancing loss, as model.router_aux_loss)" in said
    assert "bias and norm tensors not decayed (as Hugging Face Trainer)" in said
    assert "(alpaca, packed)" in said  # sliding windows per layer type: packed, not refused
    train = [r for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if (r := json.loads(line))["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    # top-2 of 4 experts: the Switch loss is 2 when routing is balanced, more when it is not
    assert all(1.9 < r["router_aux_loss"] < 4.0 and r["loss"] > 0 for r in train), train
    assert "step=3/3 loss=" in said and " router_aux_loss=" in said

    exported = checkpoints.export(str(out_dir), {}, str(tmp_path), "step-00000003", sys.executable, str(ROOT), 300)
    assert {"config.json", "model.safetensors"} <= set(exported["files"]), exported
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(exported["path"], attn_implementation="eager")
    assert model.config.output_router_logits is False  # the model's own setting, as it came
