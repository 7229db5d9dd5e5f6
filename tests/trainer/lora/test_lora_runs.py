"""LoRA under real torchrun (gloo, 2 CPU ranks) on tiny random models of two families: it trains, the
frozen base never changes, adapters-only checkpoints resume bit-exactly, and the PEFT and merged
exports give the trained model's logits; samples are recorded as it learns.

The two independent runs (one per family) run one after the other in one torchrun (``run_trainers``): each
is the trainer's own entry in a folder of its own, with the output and exit code of its own, at the cost of
one start of the ranks; the resume from the first one's checkpoint runs after them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.trainer.families import save_family
from tests.support.trainer.run import HERE, ROOT, run_trainer, run_trainers, torchrun_argv, trainer_env
from trainer.wire.ckpt_layout import list_checkpoints

pytestmark = pytest.mark.slow

SAMPLES = {"prompts": ["Add the two numbers."], "eval_rows": 1, "every_steps": 4, "max_new_tokens": 6}


def _params(model_dir: Path, out: Path, **over) -> dict:
    params = {"model_name": str(model_dir), "dataset_name": "builtin:tiny-alpaca", "output_dir": str(out),
              "max_seq_len": 128, "per_device_batch_size": 4, "learning_rate": 0.02, "max_steps": 8,
              "optim": {"schedule": "constant"}, "logging": {"eval_max_batches": 1, "samples": SAMPLES},
              "checkpoint": {"every_steps": 4, "export_merged": True}}
    params.update(over)
    return params


def _train(tmp: Path) -> list[dict]:
    return [r for r in map(json.loads, (tmp / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("lora")
    qwen = save_family("qwen2", tmp / "qwen2", tiny_model_dir)  # tied embeddings, listed targets
    mistral = save_family("mistral", tmp / "mistral", tiny_model_dir)  # sliding window, untied head
    first = _params(qwen, tmp / "a" / "out", lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
                    fsdp={"sharding": "full_shard"})
    other = _params(mistral, tmp / "c" / "out", max_steps=6, gradient_accumulation_steps=2,
                    lora={"r": 2, "alpha": 4, "dropout": 0.1, "target_modules": "all-linear",
                          "modules_to_save": ["lm_head"]},
                    model={"activation_checkpointing": "full"},
                    fsdp={"sharding": "shard_grad_op", "cpu_offload": True},
                    checkpoint={"every_steps": 3, "export_merged": True})
    a, c = run_trainers([(tmp / "a", first, None), (tmp / "c", other, None)])
    assert a.returncode == 0, a.stdout[-3000:] + a.stderr[-3000:]
    assert c.returncode == 0, c.stdout[-3000:] + c.stderr[-3000:]
    ckpts = list_checkpoints(str(tmp / "a" / "out" / "checkpoints"))
    resumed = {**first, "output_dir": str(tmp / "b" / "out"),
               "checkpoint": {**first["checkpoint"], "resume": ckpts[0].path}}
    b = run_trainer(tmp / "b", resumed)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    worker = subprocess.run(
        torchrun_argv(2, str(HERE / "lora_worker.py"), str(tmp / "worker.pt"),
                      str(tmp / "a" / "params.yaml"), list_checkpoints(str(tmp / "a" / "out" / "checkpoints"))[-1].path,
                      str(tmp / "c" / "params.yaml"), list_checkpoints(str(tmp / "c" / "out" / "checkpoints"))[-1].path),
        cwd=ROOT, env=trainer_env(tmp), capture_output=True, text=True, timeout=300)
    assert worker.returncode == 0, worker.stderr[-3000:]
    return {"tmp": tmp, "qwen2": qwen, "mistral": mistral, "a": a, "b": b,
            "worker": torch.load(tmp / "worker.pt", weights_only=False)}


def test_lora_trains_only_the_adapters_and_leaves_the_base_bit_identical(runs):
    tmp = runs["tmp"]
    for name in ("a", "c"):
        train = _train(tmp / name)
        assert train[-1]["loss"] < train[0]["loss"], (name, [r["loss"] for r in train])
    assert "lora: r=4 alpha=8 dropout=0 on q_proj, v_proj" in runs["a"].stdout
    for result in runs["worker"]:
        assert result["compared"] > 10 and result["changed"] == []  # every frozen weight as in the file
        assert result["missing"] == ([] if result is runs["worker"][1] else ["base_model.model.lm_head.weight"])
        assert result["frozen_with_grad"] == 0 and result["frozen_with_state"] == 0
    assert runs["worker"][0]["trainable"] == 8  # A and B of q_proj and v_proj in 2 blocks
    assert runs["worker"][1]["trainable"] == 2 * 7 * 2 + 1  # 7 linear layers a block, 2 blocks, + lm_head


def test_adapter_checkpoints_hold_the_adapters_only_and_resume_bit_exactly(runs):
    import torch.distributed.checkpoint as dcp

    tmp = runs["tmp"]
    ckpt = list_checkpoints(str(tmp / "a" / "out" / "checkpoints"))[-1]
    keys = dcp.FileSystemReader(ckpt.path).read_metadata().state_dict_metadata
    weights = [k for k in keys if k.startswith("app.model.")]
    assert weights and all(".lora_A." in k or ".lora_B." in k for k in weights), weights
    meta = json.loads((Path(ckpt.path) / "meta.json").read_text())
    assert meta["lora"]["target_modules"] == ["q_proj", "v_proj"]
    a, b = _train(tmp / "a"), _train(tmp / "b")
    assert [r["step"] for r in b] == [5, 6, 7, 8]
    assert [r["loss"] for r in b] == [r["loss"] for r in a[4:]]  # bit-exact
    samples_a = [json.loads(x) for x in (tmp / "a" / "samples.jsonl").read_text().splitlines()]
    samples_b = [json.loads(x) for x in (tmp / "b" / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples_a] == [0, 4, 8] and [s["step"] for s in samples_b] == [8]
    assert samples_b[0]["samples"] == samples_a[-1]["samples"]  # the same answers after the resume
    first = samples_a[0]["samples"]
    assert first[0]["prompt"] == "Add the two numbers." and "reference" not in first[0]
    assert first[1]["prompt"].startswith("### Instruction:") and first[1]["reference"]
    assert "sample step=8 2/2: '### Instruction:" in runs["a"].stdout


@pytest.mark.parametrize("run, family", [("a", "qwen2"), ("c", "mistral")])
def test_peft_and_merged_exports_give_the_trained_models_logits(runs, run, family):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tests.support.trainer.lora_worker import INPUT

    tmp = runs["tmp"]
    hf = tmp / run / "out" / "hf"
    adapter = next(p for p in hf.iterdir() if p.name.startswith("step-") and not p.name.endswith("-merged"))
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in adapter.iterdir()}
    trained = runs["worker"][0 if run == "a" else 1]["logits"]
    base = AutoModelForCausalLM.from_pretrained(runs[family]).eval()
    with torch.no_grad():
        before = base(input_ids=INPUT).logits
        peft_logits = PeftModel.from_pretrained(base, adapter).eval()(input_ids=INPUT).logits
        merged = AutoModelForCausalLM.from_pretrained(adapter.with_name(adapter.name + "-merged")).eval()
        merged_logits = merged(input_ids=INPUT).logits
    assert (trained - before).abs().max() > 1e-3  # the adapter changed what the model says
    torch.testing.assert_close(peft_logits, trained, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(merged_logits, trained, rtol=1e-4, atol=1e-5)


def test_an_adapter_checkpoint_exports_outside_the_job_as_at_its_end(runs):
    from safetensors.torch import load_file

    tmp = runs["tmp"]
    ckpt = list_checkpoints(str(tmp / "c" / "out" / "checkpoints"))[-1]
    out = subprocess.run([sys.executable, "-m", "trainer.export", ckpt.path, str(tmp / "exported"), "--merged"],
                         cwd=ROOT, env=trainer_env(tmp), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(LoRA adapter)" in out.stdout and "(merged)" in out.stdout
    in_job = tmp / "c" / "out" / "hf" / "step-00000006"
    for name in ("adapter_model.safetensors",):
        want, got = load_file(in_job / name), load_file(tmp / "exported" / name)
        assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    want = load_file(Path(str(in_job) + "-merged") / "model.safetensors")
    got = load_file(tmp / "exported-merged" / "model.safetensors")
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
