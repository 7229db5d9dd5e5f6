"""The mask each attention implementation needs for packed rows.

Packed rows hold several examples; an example starts where its position id is 0. The mask keeps
attention causal inside each example and closed across them. Hugging Face hands a 4-D mask to the
kernel as it is, and the kernels read it differently: SDPA takes a boolean mask (True = attend),
eager *adds* the mask to the scores (so it must be 0 / -inf-like floats: a boolean would add 0 or 1),
and flex needs a ``BlockMask``.
"""

from __future__ import annotations

import torch


def segment_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """Example index of every token of every row (a new example starts at position id 0)."""
    return (position_ids == 0).long().cumsum(-1)


def segment_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """Boolean 4-D mask (B, 1, L, L), True where attention is allowed: causal within each example,
    nothing across examples."""
    seg = segment_ids(position_ids)
    same = seg.unsqueeze(-1) == seg.unsqueeze(-2)
    length = position_ids.shape[-1]
    causal = torch.tril(torch.ones(length, length, dtype=torch.bool, device=position_ids.device))
    return (same & causal).unsqueeze(1)


def additive_mask(position_ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The segment mask as eager attention needs it: 0 where allowed, the dtype's minimum elsewhere
    (finite, so a row never becomes all -inf and NaN)."""
    allowed = segment_mask(position_ids)
    out = torch.zeros(allowed.shape, dtype=dtype, device=position_ids.device)
    return out.masked_fill_(~allowed, torch.finfo(dtype).min)


def block_mask(position_ids: torch.Tensor):
    """The segment mask as flex attention's ``BlockMask`` (built on the rows' device)."""
    from torch.nn.attention.flex_attention import create_block_mask

    seg = segment_ids(position_ids)

    def same_example_causal(b, h, q, kv):
        return (seg[b, q] == seg[b, kv]) & (q >= kv)

    rows, length = position_ids.shape
    return create_block_mask(same_example_causal, rows, None, length, length, device=position_ids.device)


def packed_mask(implementation: str, position_ids: torch.Tensor):
    """The mask ``implementation`` needs for packed rows (its HF or short name)."""
    if implementation == "sdpa":
        return segment_mask(position_ids)
    if implementation == "eager":
        return additive_mask(position_ids)
    if implementation in ("flex", "flex_attention"):
        return block_mask(position_ids)
    raise ValueError(f"no packed-row mask for attention implementation {implementation!r}")
