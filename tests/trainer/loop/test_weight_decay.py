"""Weight decay as Hugging Face ``Trainer`` applies it: weights decay, biases and normalisation weights do not
(RMSNorm and LayerNorm by name, ``nn.LayerNorm`` modules whatever their names), unless
``optim.decay_bias_and_norm``; a checkpoint whose optimiser groups differ is refused in one line."""

from __future__ import annotations

import pytest
import torch

from trainer.ckpt.checkpoint import AppState
from trainer.loop import optim
from trainer.loop.state import TrainState
from trainer.wire.config import OptimConfig, SettingError

SHAPES = {
    "llama": {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
              "num_key_value_heads": 2},
    "gpt2": {"n_embd": 32, "n_layer": 1, "n_head": 4},
    "olmo2": {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4},
    "qwen2": {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
              "num_key_value_heads": 2},
}
SPARED = {  # what Hugging Face Trainer's get_decay_parameter_names leaves out, for these shapes
    "llama": {"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
              "model.norm.weight"},
    "gpt2": {"transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.bias", "transformer.h.0.ln_1.bias",
             "transformer.h.0.ln_1.weight", "transformer.h.0.ln_2.bias", "transformer.h.0.ln_2.weight",
             "transformer.h.0.mlp.c_fc.bias", "transformer.h.0.mlp.c_proj.bias", "transformer.ln_f.bias",
             "transformer.ln_f.weight"},
    "olmo2": {"model.layers.0.post_attention_layernorm.weight", "model.layers.0.post_feedforward_layernorm.weight",
              "model.layers.0.self_attn.k_norm.weight", "model.layers.0.self_attn.q_norm.weight", "model.norm.weight"},
    "qwen2": {"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
              "model.layers.0.self_attn.k_proj.bias", "model.layers.0.self_attn.q_proj.bias",
              "model.layers.0.self_attn.v_proj.bias", "model.norm.weight"},
}


def _model(model_type: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, vocab_size=64, **SHAPES[model_type]))


@pytest.mark.parametrize("model_type", sorted(SHAPES))
def test_biases_and_norm_weights_are_not_decayed(model_type):
    model = _model(model_type)
    names = {p: n for n, p in model.named_parameters()}
    opt = optim.build_optimizer(model, 0.1, OptimConfig(weight_decay=0.5), torch.device("cpu"))
    decayed, spared = ({names[p] for g in opt.param_groups if bool(g["weight_decay"]) is want for p in g["params"]}
                       for want in (True, False))
    assert spared == SPARED[model_type] and decayed == set(names.values()) - spared
    assert [g["weight_decay"] for g in opt.param_groups] == [0.5, 0.0]
    assert optim.decay_note(opt) == (f"weight decay: 0.5 on {len(decayed)} weight tensors; {len(spared)} bias and "
                                     "norm tensors not decayed (as Hugging Face Trainer)")
    # an update with no gradient is the decay alone: weights shrink by lr x decay, the rest stays
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), before[n] * (1 - 0.1 * 0.5) if n in decayed else before[n], msg=n)


@pytest.mark.parametrize("cfg, groups, note", [
    (OptimConfig(weight_decay=0.5, decay_bias_and_norm=True), [0.5], "weight decay: 0.5 on every parameter"),
    (OptimConfig(), [0.0], None),
])
def test_one_group_when_nothing_is_spared(cfg, groups, note):
    opt = optim.build_optimizer(_model("llama"), 0.1, cfg, torch.device("cpu"))
    assert [g["weight_decay"] for g in opt.param_groups] == groups
    said = optim.decay_note(opt)
    assert said is None if note is None else said.startswith(note)


def test_a_checkpoint_with_other_groups_is_refused_before_torch_restores_it_wrongly():
    model = _model("llama")
    opt = optim.build_optimizer(model, 0.1, OptimConfig(weight_decay=0.5), torch.device("cpu"))
    saved = {"param_groups": [{"params": [n for n, _ in model.named_parameters()], "weight_decay": 0.5}]}
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    with pytest.raises(SettingError, match=r"^parameters\.optim\.decay_bias_and_norm: the checkpoint's optimiser "
                                           r"keeps its parameters in 1 group \(12 tensors\), this run in 2 \(9/3\): "
                                           r"set decay_bias_and_norm: true"):
        AppState(model, opt, sched, TrainState()).load_state_dict({"optim": saved})
    assert optim.resume_refusal({"param_groups": [{"params": list(range(9))}, {"params": list(range(3))}]},
                                opt) is None
