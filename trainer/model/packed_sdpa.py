"""Packed rows on CPU without the square: scaled dot-product attention called once per example.

A packed row holds several examples. Through the segment mask, SDPA's CPU kernel computes every query
against every key of the row (512 x 512 for a row of three 170-token examples) and then masks most of
it away; torch has no variable-length kernel on CPU. Here each example of each row is its own causal
SDPA call on a slice of the row, so the work is the sum of the examples' own triangles, and the result
is exactly what running the examples one by one gives. Registered with Hugging Face's attention
interface, so any model whose attention goes through it (``_supports_attention_backend``) can use it.
Short rows are cheaper through the mask (``MIN_ROW_LENGTH``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import torch.nn.functional as F

from trainer.model.packed_masks import causal_band, segment_mask
from trainer.wire.config import SettingError
from trainer.wire.model_family import layer_windows

NAME = "fsdp_tui_per_example_sdpa"
MIN_ROW_LENGTH = 256
"""Shorter rows go through the mask: the per-call cost outweighs the saved work
(``benchmarks/bench_packed_attention.py``: rows of 128 tokens slower per example, 256 and 512 faster)."""

Spans = list[list[tuple[int, int]]]
"""Per row, the (start, end) of each example."""

_ROWS: ContextVar[tuple[torch.Tensor, Spans] | None] = ContextVar("fsdp_tui_packed_rows", default=None)
_calls = 0
"""How many times a layer's attention came through here (a model that never does cannot be packed so)."""


class NotRouted(SettingError):
    """The model's attention did not come through Hugging Face's attention interface."""


UNSUPPORTED = ("softcap", "s_aux", "position_bias")
"""Attention extras the per-example path does not apply: such a layer goes through sdpa with the mask."""


def spans(position_ids: torch.Tensor) -> Spans:
    """Where each example of each row starts and ends (a new example starts at position id 0)."""
    rows, length = position_ids.shape
    starts = (position_ids == 0).nonzero().tolist()
    by_row: list[list[int]] = [[0] for _ in range(rows)]
    for row, col in starts:
        if col:
            by_row[row].append(col)
    return [list(zip(cuts, cuts[1:] + [length], strict=True)) for cuts in by_row]


@contextmanager
def examples(position_ids: torch.Tensor) -> Iterator[None]:
    """Attention inside this block sees the examples that ``position_ids`` delimits. A forward pass in
    it that never reaches ``attention`` (a model's own attention code, not Hugging Face's interface)
    raises ``NotRouted``: its examples would have attended to each other."""
    token = _ROWS.set((position_ids, spans(position_ids.cpu())))
    before = _calls
    try:
        yield
    finally:
        _ROWS.reset(token)
    if _calls == before:
        raise NotRouted("parameters.model.attention: this model's attention does not go through Hugging "
                        "Face's attention interface, so packed rows cannot be split per example; set "
                        "model.attention: sdpa (packed rows through a mask) or data.packing: false")


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              **kwargs) -> tuple[torch.Tensor, None]:
    """Hugging Face's attention-function signature: (batch, heads, length, dim) in, (batch, length,
    heads, dim) out. Outside ``examples`` it is plain SDPA (with the layer's sliding window, which
    transformers builds no mask for here). A layer with an extra the per-example calls
    do not apply (``UNSUPPORTED``), or given a mask of the model's own making (Doge's dynamic mask: no
    4-D mask is built for this implementation, so any mask here is the model's), gets plain SDPA with
    the examples' mask, and the model's mask within it."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    global _calls
    _calls += 1
    rows = _ROWS.get()
    if rows is None or query.shape[2] != key.shape[2]:
        window = _window(module, kwargs)
        if attention_mask is None and window and query.shape[2] == key.shape[2] > window:
            attention_mask = causal_band(query.shape[2], window, query.device)  # no 4-D mask came: keep the window
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    position_ids, row_spans = rows
    if attention_mask is not None or any(kwargs.get(name) is not None for name in UNSUPPORTED):
        mask = segment_mask(position_ids.to(query.device), _window(module, kwargs))
        if attention_mask is not None:
            mask = _within(attention_mask, mask)
        return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)
    window = _window(module, kwargs)
    gqa = key.shape[1] != query.shape[1]  # fewer key/value heads: the kernel shares them, no copies
    parts = []
    # split, not slices: each split's backward is one concatenation, where every slice's would fill a
    # zero tensor the size of the whole input
    for q, k, v, cuts in zip(query.split(1), key.split(1), value.split(1), row_spans, strict=True):
        lengths = [end - start for start, end in cuts]
        for qe, ke, ve in zip(q.split(lengths, dim=2), k.split(lengths, dim=2), v.split(lengths, dim=2),
                              strict=True):
            band = causal_band(qe.shape[2], window, qe.device) if window and qe.shape[2] > window else None
            parts.append(F.scaled_dot_product_attention(qe, ke, ve, attn_mask=band, dropout_p=dropout, scale=scaling,
                                                        is_causal=band is None, enable_gqa=gqa))
    batch, heads, length, dim = query.shape
    # one concatenation of every example in row order: (1, heads, rows x length, dim) -> (rows, length, ...)
    # contiguous, as sdpa's own output is: some models view it afterwards (JetMoE)
    out = torch.cat(parts, dim=2).transpose(1, 2).reshape(batch, length, heads, dim).contiguous()
    return out, None


def _window(module: torch.nn.Module, kwargs: dict) -> int | None:
    """The sliding window of this layer: the one it passes, else the one its config gives its layer type
    (PhiMoE keeps its window in the mask transformers builds, and none is built for this implementation)."""
    if kwargs.get("sliding_window"):
        return kwargs["sliding_window"]
    config = getattr(module, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    windows = layer_windows({key: getattr(text, key, None) for key in ("sliding_window", "use_sliding_window",
                                                                       "layer_types")})
    types, index = getattr(text, "layer_types", None), getattr(module, "layer_idx", None)
    kind = types[index] if types and isinstance(index, int) and index < len(types) else next(iter(windows))
    return windows.get(kind)


def _within(model_mask: torch.Tensor, examples: torch.Tensor) -> torch.Tensor:
    """The model's own mask (boolean, or additive floats) closed outside the examples' mask."""
    model_mask = model_mask[..., : examples.shape[-1]]
    if model_mask.dtype == torch.bool:
        return model_mask & examples
    return model_mask.masked_fill(~examples, torch.finfo(model_mask.dtype).min)


def _no_mask(*args, **kwargs) -> None:
    return None  # the examples come from the position ids; no 4-D mask is built


def register() -> None:
    """Make ``NAME`` an attention implementation Hugging Face models can be built with."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, _no_mask)
