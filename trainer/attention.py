"""Which attention implementation and whether to pack, for the model at hand. The packed rows' masks
are :mod:`trainer.packed_masks`; sdpa once per packed example is :mod:`trainer.packed_sdpa`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer import packed_sdpa
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
            return packed_sdpa.NAME
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
    per_example = (cfg.model.attention == "auto" and impl == "sdpa" and packing and device.type == "cpu"
                   and supports_backend and cfg.max_seq_len >= packed_sdpa.MIN_ROW_LENGTH)
    if per_example:  # in place of auto's "attention: sdpa"
        notes[0] = ("attention: sdpa once per packed example (CPU has no variable-length kernel; "
                    "a mask would compute each whole row)")
    return AttentionChoice(impl, packing, tuple(notes), per_example)
