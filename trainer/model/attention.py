"""Which attention implementation and whether to pack, for the model at hand. The packed rows' masks
are :mod:`trainer.model.packed_masks`; sdpa once per packed example is :mod:`trainer.model.packed_sdpa`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from trainer.model import packed_sdpa
from trainer.wire.config import SettingError, TrainerConfig
from trainer.wire.model_family import packing_refusal

HF_NAMES = {"sdpa": "sdpa", "eager": "eager", "flex": "flex_attention"}


class AttentionSupport(NamedTuple):
    """What the model's class declares about its attention (:func:`trainer.model.build.attention_support`)."""

    sdpa: bool
    flex: bool
    backend: bool = False
    """Its attention goes through Hugging Face's attention interface (any registered function), so
    packed rows on CPU can take sdpa once per example instead of the whole row under a mask."""
    stateful: bool = False
    """Its layers carry a state along the sequence (as transformers says: :func:`trainer.model.build.carries_state`;
    Mamba, hybrids)."""
    position_ids: bool = True
    """Its forward takes ``position_ids`` (BART-style decoders and BLOOM derive positions themselves)."""
    router_loss: bool = False
    """Its forward computes a router load-balancing loss from a token mask it can be handed
    (:func:`trainer.model.router_loss.computes_loss`)."""

    @property
    def inference(self) -> str:
        """The implementation to load it with for inference: sdpa where it has one, else eager."""
        return "sdpa" if self.sdpa else "eager"


@dataclass(frozen=True)
class AttentionChoice:
    implementation: str
    """``sdpa``, ``eager`` or ``flex``."""
    packing: bool
    notes: tuple[str, ...]
    """One line per decision worth logging (what was chosen and why)."""
    per_example: bool = False
    """sdpa on packed rows called once per example (``trainer.model.packed_sdpa``) rather than through a mask."""

    @property
    def hf_name(self) -> str:
        if self.per_example:
            return packed_sdpa.NAME
        return HF_NAMES[self.implementation]


def choose(cfg: TrainerConfig, config: dict, support: AttentionSupport, device: torch.device) -> AttentionChoice:
    """Resolve ``model.attention`` and ``data.packing`` for this model (its ``config.json`` as a dict, and
    what its class declares) and device, or refuse. A model trained with its router loss packs as any
    other (:mod:`trainer.model.router_loss`)."""
    notes = []
    impl = cfg.model.attention
    if impl == "auto":
        impl = "sdpa" if support.sdpa else "eager"
        notes.append(f"attention: {impl}" + ("" if support.sdpa else " (the model has no sdpa implementation)"))
    elif impl == "sdpa" and not support.sdpa:
        raise SettingError("parameters.model.attention: this model has no sdpa implementation; "
                           "use auto or eager")
    elif impl == "flex" and not support.flex:
        raise SettingError("parameters.model.attention: this model has no flex implementation; "
                           "use auto, sdpa or eager")
    if impl == "flex" and device.type != "cuda":  # else NotImplementedError at the first backward
        raise SettingError("parameters.model.attention: flex attention trains on GPUs only (torch has no "
                           "flex backward pass on CPU); use auto, sdpa or eager on this machine")
    refusal = packing_refusal(config, cfg.model_name)
    if refusal is None and support.stateful:
        refusal = ("its layers carry a state along the sequence (transformers marks the model stateful): packed "
                   "examples would see each other")
    if refusal is None and not support.position_ids:
        refusal = ("its forward takes no position_ids: positions would run on from one packed example into the "
                   "next")
    packing = cfg.data.packing
    if packing is None:
        packing = refusal is None
        if refusal is not None:
            notes.append(f"packing: off ({refusal})")
    elif packing and refusal is not None:
        raise SettingError(f"parameters.data.packing: {refusal}; set data.packing: false "
                           "(one example per row)")
    per_example = (cfg.model.attention == "auto" and impl == "sdpa" and packing and device.type == "cpu"
                   and support.backend and cfg.max_seq_len >= packed_sdpa.MIN_ROW_LENGTH)
    if per_example:  # in place of auto's "attention: sdpa"
        notes[0] = ("attention: sdpa once per packed example (CPU has no variable-length kernel; "
                    "a mask would compute each whole row)")
    return AttentionChoice(impl, packing, tuple(notes), per_example)

