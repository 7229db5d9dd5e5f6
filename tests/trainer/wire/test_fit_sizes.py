"""A model's sizes from its ``config.json`` alone (``trainer.wire.model_size``, torch-free: the launcher
sizes a model before anything starts) against transformers' own model of each family, built on the meta
device (no weights): every parameter counted, the blocks and the output layer apart."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from trainer.wire.model_size import KNOWN, builtin_config, size_of

SMALL = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2}


def _small(family: str) -> dict:
    kw = dict(SMALL)
    if family in ("gpt2", "gpt_bigcode", "gptj"):
        kw = {"vocab_size": 512, "n_embd": 64, "n_layer": 3, "n_head": 4}
        kw.update({"rotary_dim": 8} if family == "gptj" else {"n_inner": 96})
    elif family == "bloom":
        kw = {"vocab_size": 512, "hidden_size": 64, "n_layer": 3, "n_head": 4}
    elif family == "opt":
        kw = {"vocab_size": 512, "hidden_size": 64, "ffn_dim": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
              "word_embed_proj_dim": 64, "max_position_embeddings": 128}
    elif family == "falcon":
        kw = {"vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4}
    elif family == "mixtral":
        kw.update(num_local_experts=4, num_experts_per_tok=2)
    elif family in ("qwen2_moe", "qwen3_moe"):
        kw.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
        if family == "qwen2_moe":
            kw["shared_expert_intermediate_size"] = 48
    elif family == "gpt_neox":
        kw.pop("num_key_value_heads")
    elif family == "phi":
        kw["num_key_value_heads"] = 4
    if family in ("gemma", "gemma2", "gemma3_text", "qwen3", "glm4", "ministral"):
        kw["head_dim"] = 16
    if family in ("glm4", "phi3", "smollm3", "ministral"):
        kw["pad_token_id"] = 0
    return kw


VARIANTS = [(f, {}) for f in sorted(KNOWN)] + [
    ("qwen2", {"tie_word_embeddings": True}), ("llama", {"attention_bias": True, "mlp_bias": True}),
    ("stablelm", {"qk_layernorm": True, "use_qkv_bias": True}), ("phi", {"qk_layernorm": True}),
    ("phi", {"tie_word_embeddings": True}), ("cohere", {"use_qk_norm": True}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}), ("falcon", {"bias": True, "multi_query": False}),
    ("falcon", {"parallel_attn": False}), ("opt", {"word_embed_proj_dim": 32}), ("opt", {"do_layer_norm_before": False}),
    ("gpt2", {"n_inner": None}), ("gpt_bigcode", {"multi_query": False}), ("starcoder2", {"use_bias": False}),
    ("gpt_neox", {"attention_bias": False}), ("qwen2_moe", {"decoder_sparse_step": 2, "mlp_only_layers": [0]}),
    ("gemma2", {"tie_word_embeddings": False}), ("gptj", {"tie_word_embeddings": True}),
]


@pytest.mark.parametrize(("family", "extra"), VARIANTS, ids=[f"{f}-{'-'.join(e) or 'default'}" for f, e in VARIANTS])
def test_every_parameter_is_counted_from_the_config_alone(family, extra):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    config = AutoConfig.for_model(family, **{**_small(family), **extra})
    saved = json.loads(config.to_json_string(use_diff=True))  # what config.json holds: defaults left out
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(config)
    names = set(model._no_split_modules or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    size = size_of(saved)
    assert size is not None and size.exact
    assert size.total == sum(p.numel() for p in model.parameters())
    assert size.blocks == sum(p.numel() for b in blocks for p in b.parameters())
    assert size.block == max(sum(p.numel() for p in b.parameters()) for b in blocks)
    assert size.output == sum(p.numel() for p in head.parameters() if p is not embed)


def test_a_family_it_does_not_know_is_counted_as_a_llama_and_said_approximate():
    known = size_of({**builtin_config("builtin:small-llama")})
    other = size_of({**builtin_config("builtin:small-llama"), "model_type": "some_new_family"})
    assert known.exact and not other.exact and other.total == known.total
    assert size_of({"model_type": "llama", "hidden_size": 64}) is None  # no layers, heads, vocabulary: not a decoder
    nested = size_of({"model_type": "llava", "text_config": builtin_config("builtin:tiny-llama")})
    assert nested.total == size_of(builtin_config("builtin:tiny-llama")).total


def test_the_built_in_models_are_sized_without_building_them(tiny_model_dir):
    built = json.loads((tiny_model_dir / "config.json").read_text())
    assert size_of(builtin_config("builtin:tiny-llama")).total == size_of(built).total
    assert builtin_config("some/model") is None
