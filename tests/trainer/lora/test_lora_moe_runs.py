"""LoRA reaches a mixture of experts' fused expert weights under real torchrun (gloo, 2 CPU ranks), on tiny
random Qwen3-MoE (``all-linear``; its files keep one tensor per expert, which transformers fuses on load) and
GPT-OSS (named expert projections; its files keep them fused): it trains as PEFT alone trains, step by step,
and its PEFT-format and merged exports load and give the trained model's logits.

The two trainer runs (one per model) run one after the other in one torchrun (``run_trainers``): each is
the trainer's own entry in a folder of its own, with the output and exit code of its own, at the cost of one
start of the ranks."""

import json
import subprocess

import pytest
import torch

from tests.support.trainer.families import save_family
from tests.support.trainer.run import HERE, ROOT, run_trainers, torchrun_argv, trainer_env
from trainer.wire.ckpt_layout import list_checkpoints

pytestmark = pytest.mark.slow

RUNS = {"qwen3_moe": {"target_modules": "all-linear"},
        "gpt_oss": {"target_modules": ["q_proj", "gate_up_proj", "down_proj"]}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("lora-moe")
    out = {"tmp": tmp}
    folders, planned = {}, []
    for kind, targets in RUNS.items():
        folders[kind] = save_family(kind, tmp / kind, tiny_model_dir)
        params = {"model_name": str(folders[kind]), "dataset_name": "builtin:tiny-alpaca",
                  "output_dir": str(tmp / f"run-{kind}" / "out"), "max_seq_len": 128, "per_device_batch_size": 4,
                  "learning_rate": 0.01, "max_steps": 4, "optim": {"schedule": "constant"},
                  "model": {"attention": "eager"}, "logging": {"eval_max_batches": 1},
                  "lora": {"r": 4, "alpha": 8, **targets}, "checkpoint": {"every_steps": 4, "export_merged": True}}
        planned.append((tmp / f"run-{kind}", params, None))
    pairs = []
    for kind, run in zip(RUNS, run_trainers(planned), strict=True):
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        out[kind] = {"folder": folders[kind], "stdout": run.stdout,
                     "train": [r for r in map(json.loads, (tmp / f"run-{kind}" / "metrics.jsonl").read_text()
                                              .splitlines()) if r["kind"] == "train"]}
        pairs += [str(tmp / f"run-{kind}" / "params.yaml"),
                  list_checkpoints(str(tmp / f"run-{kind}" / "out" / "checkpoints"))[-1].path]
    worker = subprocess.run(torchrun_argv(2, str(HERE / "lora_moe_worker.py"),
                                          str(tmp / "worker.pt"), *pairs),
                            cwd=ROOT, env=trainer_env(tmp), capture_output=True, text=True, timeout=600)
    assert worker.returncode == 0, worker.stderr[-3000:]
    for kind, result in zip(RUNS, torch.load(tmp / "worker.pt", weights_only=False), strict=True):
        out[kind]["worker"] = result
    return out


@pytest.mark.parametrize("kind", list(RUNS))
def test_the_experts_are_adapted_and_train_as_peft_alone_trains_them(runs, kind):
    run = runs[kind]
    assert "gate_up_proj" in run["stdout"] and "down_proj" in run["stdout"]  # the summary line names them
    assert run["train"][-1]["loss"] < run["train"][0]["loss"]
    worker = run["worker"]
    assert worker["experts"] == 4  # gate_up_proj and down_proj in each of 2 blocks
    assert max(abs(a - b) for a, b in zip(worker["ours"], worker["peft"], strict=True)) < 2e-5, worker
    assert worker["ours"][-1] < worker["ours"][0]


@pytest.mark.parametrize("kind", list(RUNS))
def test_the_adapter_and_the_merged_model_load_and_say_what_the_trained_model_says(runs, kind):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tests.support.trainer.lora_moe_worker import INPUT

    hf = runs["tmp"] / f"run-{kind}" / "out" / "hf"
    adapter = next(p for p in hf.iterdir() if p.name.startswith("step-") and not p.name.endswith("-merged"))
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert {"gate_up_proj", "down_proj"} <= set(config["target_parameters"])
    trained = runs[kind]["worker"]["logits"]
    base = AutoModelForCausalLM.from_pretrained(runs[kind]["folder"], attn_implementation="eager").eval()
    with torch.no_grad():
        before = base(input_ids=INPUT).logits
        peft_logits = PeftModel.from_pretrained(base, adapter).eval()(input_ids=INPUT).logits
        merged = AutoModelForCausalLM.from_pretrained(adapter.with_name(adapter.name + "-merged"),
                                                      attn_implementation="eager").eval()
        merged_logits = merged(input_ids=INPUT).logits
    assert (trained - before).abs().max() > 1e-3
    torch.testing.assert_close(peft_logits, trained, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(merged_logits, trained, rtol=1e-4, atol=1e-5)
