"""A causal LM's sizes read from its ``config.json`` alone: no torch, no weights (standard library only).

The memory prediction (:mod:`trainer.wire.fit`) needs the parameter count, split into the input
embedding, the output layer, the repeated blocks and the rest, and the widths that size activations. The
launcher reads them here before anything starts; the trainer passes the same function the counts of the
model it built (exact), so both predict by one rule. The families below are counted exactly (a test
builds each on the meta device with transformers and compares); another family is counted as a
Llama-shaped decoder from the usual keys and said to be approximate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from trainer.wire.builtin_assets import PREFIX as BUILTIN_PREFIX
from trainer.wire.model_family import text_config

LLAMA_LIKE = frozenset({"llama", "mistral", "ministral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3",
                        "mixtral", "qwen2_moe", "qwen3_moe", "olmo", "olmo2", "granite", "cohere", "glm4",
                        "smollm3", "exaone4", "starcoder2", "stablelm", "phi", "gpt_neox"})
"""Families with separate (or fused, same count) q/k/v/o projections and a two- or three-matrix MLP."""
GPT2_LIKE = frozenset({"gpt2", "gpt_bigcode"})
OTHERS = frozenset({"bloom", "opt", "falcon", "gptj"})
KNOWN = LLAMA_LIKE | GPT2_LIKE | OTHERS

_UNGATED = frozenset({"starcoder2", "phi", "gpt_neox", "stablelm"}) - {"stablelm"}
"""Llama-like families whose MLP is two matrices (up, down) rather than three (gate, up, down)."""
_LAYER_NORM = frozenset({"starcoder2", "stablelm", "phi", "gpt_neox"})
"""Families whose norms are LayerNorms with a bias (two vectors); the others' RMSNorms have one."""
BUILTIN_SHAPES = {"tiny-llama": (64, 192), "small-llama": (512, 1536)}
"""The built-in Llama-shaped models (``trainer.assets``): (hidden size, MLP size); 4 blocks, 4 heads, 2
key/value heads and the built-in tokenizer's 320 tokens each. ``small-llama`` (~13M parameters, ~200 MB
of weights, gradients and Adam state) is large enough for sharding to show in each rank's memory on CPU
above the noise of activations, small enough for a CPU sweep of a few minutes."""
BUILTIN_VOCAB = 320


def builtin_config(name: str) -> dict[str, Any] | None:
    """The ``config.json`` a ``builtin:`` model is built with (``None`` for another name): the launcher
    sizes it without building it."""
    shape = BUILTIN_SHAPES.get(name.removeprefix(BUILTIN_PREFIX)) if name.startswith(BUILTIN_PREFIX) else None
    return None if shape is None else builtin_llama(*shape)


def builtin_llama(hidden: int, intermediate: int, vocab: int = BUILTIN_VOCAB) -> dict[str, Any]:
    """A built-in model's Llama config (``trainer.assets`` builds it with the tokenizer's vocabulary)."""
    return {"model_type": "llama", "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": intermediate,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
            "tie_word_embeddings": False}


_TIED = {"gemma": True, "gemma2": True, "gemma3_text": True, "gpt2": True, "gpt_bigcode": True, "bloom": True,
         "opt": True, "falcon": True, "starcoder2": True, "cohere": True, "smollm3": True}
"""Tied input and output embeddings when the config does not say (each class's own default; others untied)."""


@dataclass(frozen=True)
class ModelSize:
    """What memory depends on, in parameters and widths."""

    family: str
    exact: bool
    """Counted by this family's own rule (else as a Llama-shaped decoder: approximate)."""
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    """The MLP's width (one expert's, for a mixture of experts)."""
    gated: bool
    """Three MLP matrices (gate, up, down) rather than two."""
    embedding: int
    """Input embedding parameters (learned positions included)."""
    output: int
    """Output layer parameters (0 when tied to the input embedding)."""
    block: int
    """Parameters of the largest decoder block."""
    blocks: int
    """Parameters of all the decoder blocks."""
    experts: int = 0
    """Experts per MoE layer (0: a dense model)."""
    experts_per_token: int = 0
    linears: tuple[tuple[str, int, int, int], ...] = ()
    """Each kind of linear layer in the blocks: (name, inputs, outputs, how many in all the blocks), for
    LoRA's adapters (``all-linear`` or by name)."""
    rest: int = 0
    """Final norm and the like: outside the blocks, beside the embeddings."""

    @property
    def total(self) -> int:
        return self.embedding + self.output + self.blocks + self.rest

    @property
    def root(self) -> int:
        """What FSDP keeps in the root's unit: everything outside the blocks."""
        return self.embedding + self.output + self.rest


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return default


def _flag(cfg: dict[str, Any], *keys: str, default: bool = False) -> bool:
    for key in keys:
        if isinstance(cfg.get(key), bool):
            return cfg[key]
    return default


def size_of(config: dict[str, Any]) -> ModelSize | None:
    """The sizes of the model ``config`` (a ``config.json`` as a dict; a multimodal model's text part);
    ``None`` when it lacks the widths a decoder needs (not a causal LM this can count)."""
    cfg = text_config(config)
    family = str(cfg.get("model_type") or config.get("model_type") or "").lower()
    hidden = int(_first(cfg, "hidden_size", "n_embd", "d_model", "dim", default=0))
    layers = int(_first(cfg, "num_hidden_layers", "n_layer", "num_layers", "n_layers", default=0))
    heads = int(_first(cfg, "num_attention_heads", "n_head", "num_heads", "n_heads", default=0))
    vocab = int(_first(cfg, "vocab_size", "padded_vocab_size", default=0))
    if not (hidden and layers and heads and vocab):
        return None
    head_dim = int(_first(cfg, "head_dim", default=0) or hidden // heads)
    kv = int(_first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads) or heads)
    tied = _flag(cfg, "tie_word_embeddings", default=_TIED.get(family, False))
    if family in GPT2_LIKE:
        return _gpt2(family, cfg, vocab, hidden, layers, heads, tied)
    if family in OTHERS:
        return {"bloom": _bloom, "opt": _opt, "falcon": _falcon, "gptj": _gptj}[family](
            family, cfg, vocab, hidden, layers, heads, kv, head_dim, tied)
    return _llama(family, cfg, vocab, hidden, layers, heads, kv, head_dim, tied)


def _size(family: str, *, vocab: int, hidden: int, layers: int, heads: int, kv: int, head_dim: int,
          intermediate: int, gated: bool, embedding: int, output: int, per_layer: list[int], rest: int,
          linears: list[tuple[str, int, int, int]], experts: int = 0, top_k: int = 0) -> ModelSize:
    return ModelSize(family=family, exact=family in KNOWN, vocab=vocab, hidden=hidden, layers=layers, heads=heads,
                     kv_heads=kv, head_dim=head_dim, intermediate=intermediate, gated=gated, embedding=embedding,
                     output=output, block=max(per_layer), blocks=sum(per_layer), experts=experts,
                     experts_per_token=top_k, linears=tuple(lin for lin in linears if lin[3]), rest=rest)


def _llama(family: str, cfg: dict[str, Any], vocab: int, h: int, layers: int, heads: int, kv: int, d: int,
           tied: bool) -> ModelSize:
    q, k = heads * d, kv * d
    qkv_bias = _flag(cfg, "attention_bias", "qkv_bias", "use_qkv_bias", "use_bias", "bias",
                     default=family in ("qwen2", "qwen2_moe", "gpt_neox", "phi"))
    if family in ("starcoder2", "phi"):
        o_bias = _flag(cfg, "use_bias", default=True)
    else:  # Qwen2's, StableLM's and GLM-4's biases are on q, k and v only
        o_bias = qkv_bias and family not in ("qwen2", "qwen2_moe", "stablelm", "glm4")
    norm = 2 * h if family in _LAYER_NORM else (0 if family == "olmo" else h)
    gated = family not in _UNGATED
    inter = int(_first(cfg, "intermediate_size", "n_inner", "ffn_dim", default=4 * h))
    mlp_bias = _flag(cfg, "mlp_bias", "use_bias", default=family in ("starcoder2", "gpt_neox", "phi"))
    norms = {"gemma2": 4, "gemma3_text": 4, "olmo2": 2, "glm4": 4, "exaone4": 2, "phi": 1, "cohere": 1}.get(family, 2)
    if family == "gpt_neox" or family == "stablelm":
        norms = 2
    attn = h * q + 2 * h * k + q * h + (q + 2 * k if qkv_bias else 0) + (h if o_bias else 0)
    if family in ("qwen3", "qwen3_moe", "gemma3_text", "exaone4") or (family == "cohere" and _flag(cfg, "use_qk_norm")):
        attn += 2 * d if family != "cohere" else (q + k)
    if family == "olmo2":
        attn += q + k
    if family == "stablelm" and _flag(cfg, "qk_layernorm"):
        attn += q + k  # a bias-free LayerNorm per query head and per key head
    if family == "phi" and _flag(cfg, "qk_layernorm"):
        attn += 4 * d  # one LayerNorm for the queries, one for the keys
    dense = (3 if gated else 2) * h * inter + (((2 * inter + h) if gated else (inter + h)) if mlp_bias else 0)
    experts = int(_first(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=0))
    top_k = int(_first(cfg, "num_experts_per_tok", default=0)) if experts else 0
    moe_inter = int(_first(cfg, "moe_intermediate_size", default=inter))
    per_layer, linears = [], [("q_proj", h, q, layers), ("k_proj", h, k, layers), ("v_proj", h, k, layers),
                              ("o_proj", q, h, layers)]
    dense_layers = moe_layers = 0
    for i in range(layers):
        mlp = dense
        if experts and _is_moe_layer(family, cfg, i):
            moe_layers += 1
            mlp = experts * 3 * h * moe_inter + h * experts
            shared = int(_first(cfg, "shared_expert_intermediate_size", default=0))
            if shared:
                mlp += 3 * h * shared + h
        else:
            dense_layers += 1
        per_layer.append(attn + mlp + norms * norm)
    mlp_names = (("gate_proj", h, inter), ("up_proj", h, inter), ("down_proj", inter, h)) if gated else \
        (("up_proj", h, inter), ("down_proj", inter, h))
    linears += [(n, i, o, dense_layers) for n, i, o in mlp_names]
    if moe_layers:
        linears += [(n, i, o, moe_layers * experts) for n, i, o in
                    (("gate_proj", h, moe_inter), ("up_proj", h, moe_inter), ("down_proj", moe_inter, h))]
    head_bias = vocab if family == "phi" else 0
    return _size(family, vocab=vocab, hidden=h, layers=layers, heads=heads, kv=kv, head_dim=d,
                 intermediate=moe_inter if experts else inter, gated=gated, embedding=vocab * h,
                 output=(0 if tied else vocab * h) + head_bias, per_layer=per_layer, rest=norm, linears=linears,
                 experts=experts, top_k=top_k)


def _is_moe_layer(family: str, cfg: dict[str, Any], i: int) -> bool:
    if family == "mixtral":
        return True
    if i in (cfg.get("mlp_only_layers") or ()):
        return False
    step = int(_first(cfg, "decoder_sparse_step", default=1) or 1)
    return (i + 1) % step == 0


def _gpt2(family: str, cfg: dict[str, Any], vocab: int, h: int, layers: int, heads: int, tied: bool) -> ModelSize:
    inter = int(_first(cfg, "n_inner", default=0) or 4 * h)
    positions = int(_first(cfg, "n_positions", "max_position_embeddings", default=1024))
    d = h // heads
    kv = 1 if family == "gpt_bigcode" and _flag(cfg, "multi_query", default=True) else heads
    qkv = h + 2 * kv * d
    per = (h * qkv + qkv) + (h * h + h) + (h * inter + inter) + (inter * h + h) + 2 * 2 * h
    linears = [("c_attn", h, qkv, layers), ("c_proj", h, h, layers), ("c_fc", h, inter, layers),
               ("c_proj", inter, h, layers)]
    return _size(family, vocab=vocab, hidden=h, layers=layers, heads=heads, kv=kv, head_dim=d, intermediate=inter,
                 gated=False, embedding=vocab * h + positions * h, output=0 if tied else vocab * h,
                 per_layer=[per] * layers, rest=2 * h, linears=linears)


def _bloom(family, cfg, vocab, h, layers, heads, kv, d, tied) -> ModelSize:
    per = (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h) + 2 * 2 * h
    linears = [("query_key_value", h, 3 * h, layers), ("dense", h, h, layers), ("dense_h_to_4h", h, 4 * h, layers),
               ("dense_4h_to_h", 4 * h, h, layers)]
    return _size(family, vocab=vocab, hidden=h, layers=layers, heads=heads, kv=heads, head_dim=h // heads,
                 intermediate=4 * h, gated=False, embedding=vocab * h + 2 * h, output=0 if tied else vocab * h,
                 per_layer=[per] * layers, rest=2 * h, linears=linears)


def _opt(family, cfg, vocab, h, layers, heads, kv, d, tied) -> ModelSize:
    inter = int(_first(cfg, "ffn_dim", default=4 * h))
    proj = int(_first(cfg, "word_embed_proj_dim", default=h))
    bias = _flag(cfg, "enable_bias", default=True)
    norm = 2 * h if _flag(cfg, "layer_norm_elementwise_affine", default=True) else 0
    per = 4 * (h * h + (h if bias else 0)) + h * inter + inter * h + ((inter + h) if bias else 0) + 2 * norm
    positions = (int(_first(cfg, "max_position_embeddings", default=2048)) + 2) * h
    rest = (norm if _flag(cfg, "do_layer_norm_before", default=True) and not cfg.get("_remove_final_layer_norm")
            else 0) + (2 * proj * h if proj != h else 0)
    linears = [(n, h, h, layers) for n in ("q_proj", "k_proj", "v_proj", "out_proj")] + \
        [("fc1", h, inter, layers), ("fc2", inter, h, layers)]
    return _size(family, vocab=vocab, hidden=h, layers=layers, heads=heads, kv=heads, head_dim=h // heads,
                 intermediate=inter, gated=False, embedding=vocab * proj + positions,
                 output=0 if tied else vocab * proj, per_layer=[per] * layers, rest=rest, linears=linears)


def _falcon(family, cfg, vocab, h, layers, heads, kv, d, tied) -> ModelSize:
    new = _flag(cfg, "new_decoder_architecture")
    kv = kv if new else (1 if _flag(cfg, "multi_query", default=True) else heads)
    bias = _flag(cfg, "bias")
    inter = int(_first(cfg, "ffn_hidden_size", default=4 * h))
    qkv = (heads + 2 * kv) * d
    lns = (int(_first(cfg, "num_ln_in_parallel_attn", default=2) or 2) if new else
           (1 if _flag(cfg, "parallel_attn", default=True) else 2))
    per = h * qkv + h * h + h * inter + inter * h + lns * 2 * h + ((qkv + h + inter + h) if bias else 0)
    linears = [("query_key_value", h, qkv, layers), ("dense", h, h, layers), ("dense_h_to_4h", h, inter, layers),
               ("dense_4h_to_h", inter, h, layers)]
    return _size(family, vocab=vocab, hidden=h, layers=layers, heads=heads, kv=kv, head_dim=d, intermediate=inter,
                 gated=False, embedding=vocab * h, output=0 if tied else vocab * h, per_layer=[per] * layers,
                 rest=2 * h, linears=linears)


def _gptj(family, cfg, vocab, h, layers, heads, kv, d, tied) -> ModelSize:
    inter = int(_first(cfg, "n_inner", default=0) or 4 * h)
    per = 4 * h * h + (h * inter + inter) + (inter * h + h) + 2 * h
    linears = [(n, h, h, layers) for n in ("q_proj", "k_proj", "v_proj", "out_proj")] + \
        [("fc_in", h, inter, layers), ("fc_out", inter, h, layers)]
    return _size(family, vocab=vocab, hidden=h, layers=layers, heads=heads, kv=heads, head_dim=h // heads,
                 intermediate=inter, gated=False, embedding=vocab * h, output=(0 if tied else vocab * h) + vocab,
                 per_layer=[per] * layers, rest=2 * h, linears=linears)


def with_counts(size: ModelSize, *, embedding: int, output: int, blocks: int, block: int, rest: int) -> ModelSize:
    """``size`` with the parameter counts of a built model (the trainer's: exact for any family)."""
    return replace(size, embedding=embedding, output=output, blocks=blocks, block=block, rest=rest, exact=True)
