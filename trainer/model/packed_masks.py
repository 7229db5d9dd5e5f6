"""The mask each attention implementation needs for packed rows.

Packed rows hold several examples; an example starts where its position id is 0. The mask keeps
attention causal inside each example and closed across them. Hugging Face hands a 4-D mask to the
kernel as it is, and the kernels read it differently: SDPA takes a boolean mask (True = attend),
eager *adds* the mask to the scores (so it must be 0 / -inf-like floats: a boolean would add 0 or 1),
and flex needs a ``BlockMask``.

A mask given to the model replaces the one Hugging Face would build, sliding window included: a layer
that keeps a window (Mistral, Phi-3, and the local layers of Gemma 2/3, OLMo 3, Cohere 2...) gets it
here (``window``: a key is seen while ``q - k < window``, Hugging Face's rule), and a model whose
layers differ gets one mask per layer type, keyed as its ``config.layer_types`` names them
(:func:`packed_attention_mask`; what each type keeps is :func:`trainer.wire.model_family.layer_windows`).
"""

from __future__ import annotations

import torch


def segment_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """Example index of every token of every row (a new example starts at position id 0)."""
    return (position_ids == 0).long().cumsum(-1)


def segment_mask(position_ids: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """Boolean 4-D mask (B, 1, L, L), True where attention is allowed: causal within each example (and
    within ``window`` tokens back, when given), nothing across examples."""
    seg = segment_ids(position_ids)
    same = seg.unsqueeze(-1) == seg.unsqueeze(-2)
    return (same & causal_band(position_ids.shape[-1], window, position_ids.device)).unsqueeze(1)


def causal_band(length: int, window: int | None, device: torch.device) -> torch.Tensor:
    """(L, L) booleans: a query sees the keys at or before it, and with ``window`` only the last
    ``window`` of them (itself included)."""
    q = torch.arange(length, device=device).unsqueeze(-1)
    k = torch.arange(length, device=device).unsqueeze(0)
    band = k <= q
    return band & (k > q - window) if window else band


def additive_mask(position_ids: torch.Tensor, dtype: torch.dtype = torch.float32,
                  window: int | None = None) -> torch.Tensor:
    """The segment mask as eager attention needs it: 0 where allowed, the dtype's minimum elsewhere
    (finite, so a row never becomes all -inf and NaN)."""
    allowed = segment_mask(position_ids, window)
    out = torch.zeros(allowed.shape, dtype=dtype, device=position_ids.device)
    return out.masked_fill_(~allowed, torch.finfo(dtype).min)


FLEX_BLOCK = 128
"""The tile flex attention's kernels skip or compute whole (its default ``BLOCK_SIZE``)."""


def block_mask(position_ids: torch.Tensor, window: int | None = None):
    """The segment mask as flex attention's ``BlockMask`` (built on the rows' device), the same one
    ``create_block_mask`` gives for it.

    ``create_block_mask`` evaluates the mask for every (query, key) pair in eager mode: B x L x L
    booleans and larger temporaries (GiBs at L = 16k) on the GPU at every step. Here each 128 x 128
    tile is classified from the first and last example index in its query and key blocks (examples
    are contiguous and their indices consecutive): a tile is empty above the diagonal or where the two
    blocks share no example, full where both lie wholly inside one example below the diagonal, else
    partial (the mask function decides per element). That takes B x (L / 128)^2 tiles. With a
    ``window`` a tile is also empty when its nearest pair is ``window`` or more apart, and full only
    when its farthest pair is less."""
    from torch.nn.attention.flex_attention import BlockMask

    seg = segment_ids(position_ids)

    if window:
        def same_example_causal(b, h, q, kv):
            return (seg[b, q] == seg[b, kv]) & (q >= kv) & (q - kv < window)
    else:
        def same_example_causal(b, h, q, kv):
            return (seg[b, q] == seg[b, kv]) & (q >= kv)

    rows, length = position_ids.shape
    blocks = -(-length // FLEX_BLOCK)
    tail = blocks * FLEX_BLOCK - length
    first = seg[:, ::FLEX_BLOCK]
    last = torch.nn.functional.pad(seg, (0, tail), value=0)[:, FLEX_BLOCK - 1::FLEX_BLOCK]
    last[:, -1] = seg[:, -1]
    # [b, i, j]: query block i, key block j
    below = torch.ones(blocks, blocks, dtype=torch.bool, device=seg.device).tril_()
    share = (first.unsqueeze(2) <= last.unsqueeze(1)) & (first.unsqueeze(1) <= last.unsqueeze(2))
    one = first == last
    whole = torch.ones(blocks, dtype=torch.bool, device=seg.device)
    whole[-1] = tail == 0
    inside = (one & whole).unsqueeze(2) & (one & whole).unsqueeze(1) & (first.unsqueeze(2) == first.unsqueeze(1))
    full = inside & below.tril(-1)
    if window:
        start = torch.arange(blocks, device=seg.device) * FLEX_BLOCK
        end = (start + FLEX_BLOCK).clamp(max=length) - 1
        full = full & ((end.unsqueeze(1) - start.unsqueeze(0)) < window)  # farthest pair of the tile
        share = share & ((start.unsqueeze(1) - end.unsqueeze(0)) < window)  # nearest pair
    partial = share & below & ~full
    return BlockMask.from_kv_blocks(*_ordered(partial), *_ordered(full), BLOCK_SIZE=(FLEX_BLOCK, FLEX_BLOCK),
                                    mask_mod=same_example_causal, seq_lengths=(length, length))


def _ordered(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per query block, how many key blocks are set and their indices first (as flex reads them);
    shaped (B, 1 head, blocks[, blocks])."""
    dense = tiles.unsqueeze(1).to(torch.int32)
    count = dense.sum(dim=-1).to(torch.int32)
    order = torch.argsort(dense, dim=-1, descending=True, stable=True).to(torch.int32)
    return count.contiguous(), order.contiguous()


def packed_mask(implementation: str, position_ids: torch.Tensor, window: int | None = None):
    """The mask ``implementation`` needs for packed rows (its HF or short name)."""
    if implementation == "sdpa":
        return segment_mask(position_ids, window)
    if implementation == "eager":
        return additive_mask(position_ids, window=window)
    if implementation in ("flex", "flex_attention"):
        return block_mask(position_ids, window)
    raise ValueError(f"no packed-row mask for attention implementation {implementation!r}")


def packed_attention_mask(implementation: str, position_ids: torch.Tensor, layers: dict[str, int | None]):
    """What the model takes as ``attention_mask`` for packed rows: one mask when every layer attends
    alike, else a dict from layer type to its mask (transformers' models with mixed layers read it so,
    ``causal_mask_mapping[config.layer_types[i]]``). ``layers``: each layer type's window (``None``:
    the whole example), as :func:`trainer.wire.model_family.layer_windows` reads it from the config; each
    distinct window is built once."""
    masks: dict[int | None, object] = {}
    for window in layers.values():
        if window not in masks:
            masks[window] = packed_mask(implementation, position_ids, window)
    if len(layers) == 1:
        return masks[next(iter(layers.values()))]
    return {kind: masks[window] for kind, window in layers.items()}
