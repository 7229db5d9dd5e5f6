"""QLoRA on a GPU (``gpu`` mark: it runs only where CUDA and bitsandbytes are, never on the CPU machines that
run the suite): a tiny random Qwen2-shaped model loaded in 4-bit NF4 trains its LoRA adapters under FSDP2,
the checkpoint holds the adapters only, and the exported adapter loads on the full-precision base."""

import json

import pytest
import torch

from tests.support.trainer.families import save_family
from tests.support.trainer.run import run_trainer
from trainer.wire.ckpt_layout import list_checkpoints

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_qlora_trains_nf4_base_adapters_only_and_exports(tmp_path, tiny_model_dir):
    pytest.importorskip("bitsandbytes")
    model = save_family("qwen2", tmp_path / "qwen2", tiny_model_dir)
    params = {"model_name": str(model), "dataset_name": "builtin:tiny-alpaca", "output_dir": str(tmp_path / "out"),
              "max_seq_len": 128, "per_device_batch_size": 4, "learning_rate": 0.02, "max_steps": 6,
              "optim": {"schedule": "constant"},
              "lora": {"r": 4, "alpha": 8, "target_modules": "all-linear", "quantize": "nf4"},
              "logging": {"eval_max_batches": 1, "samples": {"prompts": ["Add 2 + 3."], "max_new_tokens": 4}},
              "checkpoint": {"every_steps": 3, "export_merged": True}}
    out = run_trainer(tmp_path, params, nproc=min(2, torch.cuda.device_count()))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    train = [r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]
    assert train[-1]["loss"] < train[0]["loss"]
    import torch.distributed.checkpoint as dcp

    ckpt = list_checkpoints(str(tmp_path / "out" / "checkpoints"))[-1]
    assert ckpt.adapter
    weights = [k for k in dcp.FileSystemReader(ckpt.path).read_metadata().state_dict_metadata if k.startswith("app.model.")]
    assert weights and all(".lora_" in k for k in weights)
    assert [json.loads(x)["step"] for x in (tmp_path / "samples.jsonl").read_text().splitlines()] == [0, 6]
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model)
    adapter = tmp_path / "out" / "hf" / "step-00000006"
    x = torch.tensor([[1, 17, 42, 99]])
    with torch.no_grad():
        peft_logits = PeftModel.from_pretrained(base, adapter)(input_ids=x).logits
        merged = AutoModelForCausalLM.from_pretrained(str(adapter) + "-merged")(input_ids=x).logits
    torch.testing.assert_close(merged, peft_logits, rtol=1e-4, atol=1e-4)

