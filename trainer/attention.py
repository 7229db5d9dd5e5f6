"""Which attention implementation and whether to pack, for the model at hand; the packed-row mask
each implementation needs.

Packed rows hold several examples; an example starts where its position id is 0. The mask keeps
attention causal inside each example and closed across them. Hugging Face hands a 4-D mask to the
kernel as it is, and the kernels read it differently: SDPA takes a boolean mask (True = attend),
eager *adds* the mask to the scores (so it must be 0 / -inf-like floats: a boolean would add 0 or 1),
and flex needs a ``BlockMask``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.config import SettingError, TrainerConfig
from trainer.model_family import packing_refusal

HF_NAMES = {"sdpa": "sdpa", "eager": "eager", "flex": "flex_attention"}


@dataclass(frozen=True)
class AttentionChoice:
    implementation: str
    """``sdpa``, ``eager`` or ``flex``."""
    packing: bool
    notes: tuple[str, ...]
    """One line per decision worth logging (what was chosen and why)."""
    per_example: bool = False
    """sdpa on packed rows called once per example (``trainer.packed_sdpa``) rather than through a mask."""

    @property
    def hf_name(self) -> str:
        if self.per_example:
            from trainer.packed_sdpa import NAME

            return NAME
        return HF_NAMES[self.implementation]


def choose(cfg: TrainerConfig, config: dict, supports_sdpa: bool, supports_flex: bool,
           device: torch.device, supports_backend: bool = False) -> AttentionChoice:
    """Resolve ``model.attention`` and ``data.packing`` for this model and device, or refuse.
    ``supports_backend``: the model's attention goes through Hugging Face's attention interface, so
    packed rows on CPU can take sdpa once per example instead of the whole row under a mask."""
    notes = []
    impl = cfg.model.attention
    if impl == "auto":
        impl = "sdpa" if supports_sdpa else "eager"
        notes.append(f"attention: {impl}" + ("" if supports_sdpa else " (the model has no sdpa implementation)"))
    elif impl == "sdpa" and not supports_sdpa:
        raise SettingError("parameters.model.attention: this model has no sdpa implementation; "
                           "use auto or eager")
    elif impl == "flex" and not supports_flex:
        raise SettingError("parameters.model.attention: this model has no flex implementation; "
                           "use auto, sdpa or eager")
    if impl == "flex" and device.type != "cuda":  # else NotImplementedError at the first backward
        raise SettingError("parameters.model.attention: flex attention trains on GPUs only (torch has no "
                           "flex backward pass on CPU); use auto, sdpa or eager on this machine")
    refusal = packing_refusal(config, cfg.model_name)
    packing = cfg.data.packing
    if packing is None:
        packing = refusal is None
        if refusal is not None:
            notes.append(f"packing: off ({refusal})")
    elif packing and refusal is not None:
        raise SettingError(f"parameters.data.packing: {refusal}; set data.packing: false "
                           "(one example per row)")
    from trainer.packed_sdpa import MIN_ROW_LENGTH

    per_example = (cfg.model.attention == "auto" and impl == "sdpa" and packing and device.type == "cpu"
                   and supports_backend and cfg.max_seq_len >= MIN_ROW_LENGTH)
    if per_example:  # in place of auto's "attention: sdpa"
        notes[0] = ("attention: sdpa once per packed example (CPU has no variable-length kernel; "
                    "a mask would compute each whole row)")
    return AttentionChoice(impl, packing, tuple(notes), per_example)


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
