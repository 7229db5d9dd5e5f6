"""Every mixture-of-experts family the installed transformers offers whose causal-LM forward computes a
router load-balancing loss, each as a tiny random model built here (the family's defaults shrunk: no
download)."""

from __future__ import annotations

import warnings

SIZES = {"vocab_size": 128, "hidden_size": 32, "intermediate_size": 32, "moe_intermediate_size": 16,
         "shared_expert_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 256, "num_experts": 4,
         "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
         "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 8,
         "n_group": 1, "topk_group": 1, "first_k_dense_replace": 0, "sliding_window": 6, "pad_token_id": 0,
         "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}
"""Sizes a tiny model takes, where the family's config has the key (a sliding window shorter than the
examples, so that windowed layers are tested inside each example)."""
OVERRIDES: dict[str, dict] = {
    "jetmoe": {"kv_channels": 8, "num_key_value_heads": 4},
    "doge": {"is_moe": True, "num_experts": 4, "num_experts_per_tok": 2},
    "dbrx": {"d_model": 32, "n_heads": 4, "n_layers": 2, "max_seq_len": 256,
             "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
             "ffn_config": {"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2, "hidden_size": 32}},
    "granitemoehybrid": {"mamba_n_heads": 4, "mamba_d_head": 16, "mamba_n_groups": 1, "mamba_d_state": 8},
}
"""What a family needs beyond :data:`SIZES` to build tiny."""


def moe_types() -> list[str]:
    """Model types whose causal-LM class computes a router loss it can be handed a token mask for."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from trainer.model.router_loss import computes_loss

    found = []
    for kind, names in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()):
        name = names[0] if isinstance(names, (list, tuple)) else names
        try:
            if not _may_route(CONFIG_MAPPING[kind]):
                continue
            cls = getattr(transformers, name)
        except (ImportError, AttributeError, KeyError):
            continue
        if computes_loss(cls):
            found.append(kind)
    return found


def _may_route(config_class) -> bool:
    """Whether a config class (or one of its sub-configs) names ``output_router_logits``, read without
    building it (some validate their defaults as a whole only)."""
    if hasattr(config_class, "output_router_logits") or "output_router_logits" in getattr(
            config_class, "__dataclass_fields__", {}):
        return True
    return any(_may_route(sub) for sub in getattr(config_class, "sub_configs", {}).values() if isinstance(sub, type))


def tiny_config(kind: str):
    """``kind``'s default config with :data:`SIZES` wherever it has the key, its layer types (if any) cut to
    two different ones, and its router loss asked for."""
    from transformers import AutoConfig

    defaults = AutoConfig.for_model(kind).to_dict()
    over = {k: v for k, v in SIZES.items() if k in defaults}
    types = defaults.get("layer_types")
    if types:
        distinct = list(dict.fromkeys(types))
        over["layer_types"] = (distinct + distinct)[:2]
    if "mlp_only_layers" in defaults:
        over["mlp_only_layers"] = []
    over.update(OVERRIDES.get(kind, {}))
    return AutoConfig.for_model(kind, **over, output_router_logits=True, router_aux_loss_coef=0.02)


def tiny_model(kind: str, seed: int = 0):
    """A random ``kind`` model of :func:`tiny_config` (float32, training mode)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForCausalLM.from_config(tiny_config(kind), torch_dtype=torch.float32).train()
