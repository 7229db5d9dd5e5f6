"""The workload's model as the interconnect self-test sees it on a node: the parameters of one decoder block
(the per-block all-gather FSDP sends) and of the whole model, from its ``config.json``. Standard library
only (``yaml`` where it is there), shipped beside ``nettest.py``."""

from __future__ import annotations

import json
import os


def block_params(config: dict) -> tuple[int, int] | None:
    """(parameters of one decoder block, of the whole model) from a Hugging Face ``config.json`` of a
    Llama-shaped decoder (attention with grouped K/V heads, a gated MLP, two norms); ``None`` when the
    config lacks the sizes."""
    def num(*keys: str) -> int | None:
        for key in keys:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    hidden, layers = num("hidden_size", "n_embd", "d_model"), num("num_hidden_layers", "n_layer", "num_layers")
    if hidden is None or layers is None:
        return None
    heads = num("num_attention_heads", "n_head") or 1
    head_dim = num("head_dim") or hidden // heads
    kv = num("num_key_value_heads") or heads
    inner = num("intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
    attention = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    block = attention + 3 * hidden * inner + 2 * hidden
    vocab = num("vocab_size") or 0
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return block, layers * block + embeddings + hidden


def model_shape(params_path: str) -> dict | None:
    """The workload's model, where its ``model_name`` is a folder with a ``config.json`` on this node."""
    try:
        import yaml

        with open(params_path, encoding="utf-8") as f:
            params = yaml.safe_load(f) or {}
        name = os.path.expanduser(str(params.get("model_name") or ""))
        if not name:
            return None
        with open(os.path.join(name, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    sizes = block_params(config) if isinstance(config, dict) else None
    if sizes is None:
        return None
    return {"name": os.path.basename(name.rstrip("/")), "block_params": sizes[0], "total_params": sizes[1]}
