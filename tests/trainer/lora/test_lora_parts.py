"""LoRA's parts in one process, table-driven over families: names, targets, refusals, PEFT's initial values,
the PEFT-format and merged exports against PEFT's own model, and the samples wire format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from tests.support.trainer.families import save_family
from trainer.lora import adapters as lora
from trainer.lora import export as lora_export
from trainer.model.source import ModelSource
from trainer.wire.config import LoraConfig, SettingError, TrainerConfig
from trainer.wire.samples import MAX_TEXT_CHARS, SampleSet

BASE = {"model_name": "m", "dataset_name": "d", "output_dir": "o"}


@pytest.mark.parametrize(("name", "base"), [
    ("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight", "model.layers.0.self_attn.q_proj.weight"),
    ("base_model.model.model.layers.0._checkpoint_wrapped_module.mlp.up_proj.base_layer.bias",
     "model.layers.0.mlp.up_proj.bias"),
    ("base_model.model.model.layers.1.self_attn.q_proj.lora_A.default.weight", None),
    ("base_model.model.transformer.wte.lora_embedding_B.default", None),
    ("base_model.model.lm_head.modules_to_save.default.weight", "lm_head.weight"),
    ("base_model.model.lm_head.original_module.weight", "lm_head.weight"),
    ("base_model.model.model.norm.weight", "model.norm.weight"),
    ("base_model.model.model.rotary_emb.inv_freq", "model.rotary_emb.inv_freq"),
])
def test_a_peft_name_reads_its_base_weight(name, base):
    assert lora.base_name(name) == base


@pytest.mark.parametrize(("params", "words"), [
    ({"lora": {"r": 8}, "model": {"from_scratch": True}}, "model.from_scratch"),
    ({"checkpoint": {"export_merged": True}}, "set lora"),
    ({"logging": {"samples": {"every_steps": 5}}}, "give prompts"),
    ({"logging": {"samples": {"prompts": ["hi"], "max_new_tokens": 0}}}, "greater than 0"),
    ({"lora": {"r": 0}}, "greater than 0"),
    ({"lora": {"target_modules": "all"}}, "all-linear"),
    ({"lora": {"quantize": "int4"}}, "nf4"),
    ({"lora": {"lora_alpha": 16}}, "Extra inputs"),
])
def test_settings_lora_and_samples_refuse(params, words):
    with pytest.raises(ValidationError, match=words):
        TrainerConfig.model_validate({**BASE, **params})


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("families")
    return {kind: save_family(kind, tmp / kind, tiny_model_dir)
            for kind in ("gpt2", "phi3", "gpt_neox", "llama", "qwen2", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3")}


def _skeleton(cfg: LoraConfig, folder: Path):
    return lora_export.skeleton(cfg, ModelSource.resolve(str(folder)), False)


def test_a_target_the_model_lacks_stops_the_run_naming_the_key_and_its_layers(folders):
    cfg = LoraConfig(target_modules=["q_proj", "qkv"])
    with pytest.raises(SettingError, match=r"parameters\.lora\.target_modules: LlamaForCausalLM has no module "
                                           r"named 'qkv'; its layers are named: .*q_proj"):
        _skeleton(cfg, folders["llama"])
    with pytest.raises(SettingError, match=r"parameters\.lora\.modules_to_save: .* 'head'"):
        _skeleton(LoraConfig(modules_to_save=["head"]), folders["llama"])


def test_initial_values_are_peft_s_own_and_the_same_on_every_rank(folders):
    cfg = LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    first = lora.Adapters(cfg, seed=7)
    second = lora.Adapters(cfg, seed=7)
    model = first.apply(_meta_base(folders["llama"]))
    second.apply(_meta_base(folders["llama"]))
    assert set(first.initial) == {n for n, p in model.named_parameters() if p.requires_grad}
    assert all(torch.equal(first.initial[k], second.initial[k]) for k in first.initial)  # a rank's copy = any rank's
    a = [v for k, v in first.initial.items() if ".lora_A." in k]
    b = [v for k, v in first.initial.items() if ".lora_B." in k]
    assert all(v.abs().sum() > 0 for v in a) and all(v.abs().sum() == 0 for v in b)  # kaiming A, zero B
    assert all(not p.requires_grad for n, p in model.named_parameters() if lora.base_name(n) is not None)


def _meta_base(folder: Path):
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer.model.loading import parameters_on_meta

    with parameters_on_meta():
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))


@pytest.mark.parametrize(("kind", "targets", "kept"), [
    ("gpt2", ["c_attn", "c_fc"], None),  # Conv1D (fan-in x fan-out weights)
    ("phi3", "all-linear", ["lm_head"]),  # fused qkv_proj and gate_up_proj
    ("gpt_neox", ["query_key_value", "dense_4h_to_h"], ["embed_in"]),  # a trained copy of the input embedding
    ("llama", ["q_proj", "embed_tokens"], None),  # an embedding adapted too
    ("qwen2", ["q_proj"], ["lm_head"]),  # a trained copy of a tied output layer
    # fused expert weights, adapted through PEFT's parameter targeting; Qwen3-MoE, Mixtral and DeepSeek-V3 keep one
    # tensor per expert in their files (transformers fuses them on load), GPT-OSS keeps them fused
    ("qwen3_moe", "all-linear", None),
    ("qwen3_moe", ["q_proj", "down_proj"], None),
    ("mixtral", "all-linear", None),
    ("mixtral", ["gate_up_proj", "down_proj", "v_proj"], None),
    ("gpt_oss", "all-linear", None),
    ("gpt_oss", ["gate_up_proj", "q_proj"], ["lm_head"]),
    ("deepseek_v3", "all-linear", None),
    ("deepseek_v3", ["gate_up_proj", "q_b_proj"], None),
])
def test_exports_give_the_peft_models_logits(folders, tmp_path, kind, targets, kept):
    from peft import PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    cfg = LoraConfig(r=4, alpha=8, target_modules=targets, modules_to_save=kept)
    base = AutoModelForCausalLM.from_pretrained(folders[kind]).eval()
    x = torch.tensor([[1, 17, 42, 99, 7, 250]])
    with torch.no_grad():
        before = base(input_ids=x).logits
    model = get_peft_model(base, lora.peft_config(cfg, model=base), autocast_adapter_dtype=False).eval()
    if kind in ("qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"):  # the experts are adapted
        assert any(getattr(m, "parameter_name", "") in ("gate_up_proj", "down_proj") for m in model.modules())
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)  # trained: B no longer zero
        want = model(input_ids=x).logits
    state = {lora.clean_name(n): p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    adapter = lora_export.write_adapter(state, cfg, ModelSource.resolve(str(folders[kind])), False, tmp_path / "adapter")
    merged = lora_export.write_merged(state, cfg, ModelSource.resolve(str(folders[kind])), False, tmp_path / "merged")
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 4
    fresh = AutoModelForCausalLM.from_pretrained(folders[kind]).eval()
    with torch.no_grad():
        got_adapter = PeftModel.from_pretrained(fresh, adapter).eval()(input_ids=x).logits
        got_merged = AutoModelForCausalLM.from_pretrained(merged).eval()(input_ids=x).logits
    assert (want - before).abs().max() > 1e-3
    torch.testing.assert_close(got_adapter, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_merged, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("line", "expect"), [
    ('{"step": 3, "samples": [{"prompt": "p", "answer": "a", "reference": "r"}], "time": 1.5}', (3, [("p", "a", "r")])),
    ('{"step": 3, "samples": [{"prompt": "p", "answer": 7}, "x", {"prompt": "q", "answer": "b"}]}', (3, [("q", "b", None)])),
    ('{"step": true, "samples": []}', None),
    ('{"step": -1, "samples": []}', None),
    ('{"step": 2, "samples": {"prompt": "p"}}', None),
    ('[1, 2]', None),
    ('not json', None),
])
def test_the_samples_line_is_decoded_into_typed_bounded_values(line, expect):
    found = SampleSet.from_json(line)
    if expect is None:
        assert found is None
        return
    assert (found.step, [(s.prompt, s.answer, s.reference) for s in found.samples]) == expect
    long = SampleSet.from_json(json.dumps({"step": 1, "time": True, "samples": [{"prompt": "p" * 10**5, "answer": ""}] * 100}))
    assert len(long.samples) == 64 and len(long.samples[0].prompt) == MAX_TEXT_CHARS and long.time is None


def test_validate_names_a_missing_target_at_its_line_and_refuses_nf4_on_cpu(folders, tmp_path):
    from launcher.workload.validate import validate_text

    text = (f"experiment_name: q\ncompute: {{accelerator_type: CPU, procs_per_node: 2, num_accelerators: 2}}\n"
            f"parameters:\n  model_name: {folders['phi3']}\n  dataset_name: builtin:tiny-alpaca\n  output_dir: o\n"
            "  lora:\n    target_modules:\n      - qkv_proj\n      - q_proj\n    modules_to_save: [lm_head]\n"
            "    quantize: nf4\n")
    problems = validate_text(text, "w.yaml").problems
    said = {(p.path, p.line) for p in problems}
    assert ("parameters.lora.target_modules[1]", 10) in said and ("parameters.lora.quantize", 12) in said
    assert len(problems) == 2, [p.format() for p in problems]
    missing = next(p for p in problems if p.path.endswith("[1]"))
    assert "no layer named 'q_proj'" in missing.message and "qkv_proj" in missing.hint


@pytest.mark.parametrize(("over", "cuda", "words"), [
    ({}, False, "parameters.lora.quantize: nf4 runs through bitsandbytes on CUDA and this node's torch has no CUDA"),
    ({}, True, "parameters.lora.quantize: nf4 needs bitsandbytes on every node: add 'bitsandbytes>=0.50,<1'"),
    ({"lora": None}, False, None),
])
def test_nf4_is_refused_in_one_line_where_the_node_cannot(over, cuda, words):
    """What a node says at start (here: no CUDA; bitsandbytes is not installed on the machines that run this)."""
    pytest.importorskip("torch")
    from trainer.lora.qlora import refusal

    if cuda and __import__("importlib").util.find_spec("bitsandbytes") is not None:
        pytest.skip("bitsandbytes is installed here")
    cfg = TrainerConfig.model_validate({**BASE, "lora": {"quantize": "nf4"}, **over})
    said = refusal(cfg, cuda=cuda)
    assert said == words if words is None else said.startswith(words) and "\n" not in said


def test_a_samples_prompt_is_rendered_as_the_data_renders_a_prompt(tiny_model_dir):
    from transformers import AutoTokenizer

    from trainer.data.chat import choose_template
    from trainer.loop.samples import render

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    template = choose_template(tok, None, "builtin:tiny-llama").text
    assert tok.decode(render("Say hi.", tok, "chat", 64, template)) == "<|user|>\nSay hi.</s>\n<|assistant|>\n"
    assert tok.decode(render("Say hi.", tok, "alpaca", 64)) == "<s>### Instruction:\nSay hi.\n\n### Response:\n"
    assert tok.decode(render("Say hi.", tok, "text", 64)).startswith("<s>")


@pytest.mark.parametrize(("kind", "settings", "said"), [
    ("qwen3_moe", {"dropout": 0.1}, "parameters.lora.dropout: PEFT adapts Qwen3MoeForCausalLM's fused expert weights "
                                    "(down_proj, gate_up_proj) without dropout: set lora.dropout: 0"),
    ("qwen3_moe", {"target_modules": ["gate_proj"]}, "parameters.lora.target_modules: Cannot convert PEFT target(s) "
                                                     "gate_proj without also targeting up_proj"),
    ("gpt_oss", {"target_modules": ["w1"]}, "parameters.lora.target_modules: GptOssForCausalLM has no module named "
                                            "'w1'; its layers are named: down_proj, embed_tokens, gate_up_proj, "
                                            "k_proj, lm_head, o_proj, q_proj, v_proj"),
])
def test_what_cannot_reach_the_experts_is_refused_in_one_line_naming_what_can(folders, kind, settings, said):
    with pytest.raises(SettingError) as err:
        _skeleton(LoraConfig(**settings), folders[kind])
    assert str(err.value).startswith(said) and "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"])
def test_every_weight_of_a_lora_moe_reads_its_base_weight(folders, kind):
    """What rank 0 broadcasts when the files keep one tensor per expert: every PEFT name finds its base
    weight (two wrappers around one experts module included)."""
    from transformers import AutoModelForCausalLM

    cfg = LoraConfig(r=4, target_modules="all-linear")
    adapters = lora.Adapters(cfg, seed=0)
    model = adapters.apply(_meta_base(folders[kind]))
    base = AutoModelForCausalLM.from_pretrained(folders[kind]).state_dict()
    full = adapters.full_state(base, model)
    assert set(full) == {lora.clean_name(n) for n in model.state_dict()}
    wrapped = [n for n in full if ".base_layer.base_layer." in n]
    assert wrapped and all(torch.equal(full[n], base[lora.base_name(n)]) for n in wrapped)


@pytest.mark.parametrize("kind", ["qwen3_moe", "gpt_oss", "mixtral"])
def test_validate_takes_a_named_expert_projection_as_the_trainer_does(folders, kind):
    """Qwen3-MoE's and Mixtral's files keep one tensor per expert (gate_proj, w1...), GPT-OSS's one fused
    tensor without a layer of its own: gate_up_proj names the weight the model holds either way."""
    from launcher.workload.validate import validate_text

    text = (f"experiment_name: q\ncompute: {{accelerator_type: CPU, procs_per_node: 2, num_accelerators: 2}}\n"
            f"parameters:\n  model_name: {folders[kind]}\n  dataset_name: builtin:tiny-alpaca\n  output_dir: o\n"
            "  lora:\n    target_modules: [gate_up_proj, down_proj, q_proj, nothing_proj]\n")
    problems = validate_text(text, "w.yaml").problems
    assert [p.path for p in problems] == ["parameters.lora.target_modules[3]"], [p.format() for p in problems]
    assert "gate_up_proj" in problems[0].hint
