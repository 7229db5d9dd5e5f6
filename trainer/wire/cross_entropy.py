"""How the trainer's loss meets the vocabulary, read from settings and ``config.json`` alone (standard library
only): whether the cross-entropy runs a chunk of positions at a time, how many positions a chunk holds, and
what a family does to its output layer's logits before the loss.

The trainer applies these rules (``trainer/loop/loss.py``); the launcher's memory prediction reads the same
figures, so both see one rule: with chunks, the loss holds one chunk's logits at a time
(:func:`logits_rows`), never a micro-batch's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHUNK_BYTES = 32 * 2**20
"""The fp32 logits of one chunk on CPU: positions a chunk are this over 4 bytes x the vocabulary (256 positions
of a 32k vocabulary, 65 of a 128k one, 32 of a 256k one). Its computation holds a few such tensors at once
(the logits, their softmax and its gradient). Chunks of 16 to 512 positions of a 128k vocabulary ran at the
same speed on CPU (BENCHMARKS.md), so the smallest that costs nothing is taken. A row of the largest
vocabularies in use (256k: 1 MiB) fits many times: a chunk never needs to split the vocabulary itself."""
CUDA_CHUNK_BYTES = 256 * 2**20
"""The same on a GPU, where a matrix product needs a few hundred rows to keep the tensor cores busy (512
positions of a 128k vocabulary); still a small share of a GPU's memory (the GPU proof measures it)."""


def chunk_rows(vocab: int, cuda: bool = False) -> int:
    """Positions per chunk for this vocabulary (at least one), on a GPU or on CPU."""
    return max(1, (CUDA_CHUNK_BYTES if cuda else CHUNK_BYTES) // (4 * max(1, vocab)))


def chunks(setting: str, positions: int, vocab: int, cuda: bool = False) -> bool:
    """Whether a micro-batch of ``positions`` learned positions takes the loss in chunks: ``chunked`` and
    ``fused`` always; ``auto`` where its logits are more than one chunk (below that the full logits are
    one chunk's worth, and computing them whole is the reference way); ``full`` never."""
    if setting == "full":
        return False
    if setting == "auto":
        return positions > chunk_rows(vocab, cuda)
    return True


def logits_rows(setting: str, positions: int, vocab: int, cuda: bool = False) -> int:
    """How many positions' logits the loss holds at once for a micro-batch of ``positions`` learned positions
    (the rows of its largest tensor, ``[rows, vocab]``): every position with the full logits, one chunk's
    with chunks."""
    return min(positions, chunk_rows(vocab, cuda)) if chunks(setting, positions, vocab, cuda) else positions


@dataclass(frozen=True)
class LogitMap:
    """What a family's forward does to its output layer's logits before the loss, in the order it does it:
    a product (Cohere's ``logit_scale``, Falcon-H1's ``lm_head_multiplier``), a quotient (Granite's
    ``logits_scaling``) and Gemma's soft-capping (``cap * tanh(logits / cap)``). The chunked loss applies
    the same to each chunk; a model that does something else is found at its first step (its logits are
    checked against this map) and keeps the full logits."""

    multiply: float | None = None
    divide: float | None = None
    softcap: float | None = None

    def words(self) -> str:
        parts = []
        if self.multiply is not None:
            parts.append(f"x {self.multiply:g}")
        if self.divide is not None:
            parts.append(f"/ {self.divide:g}")
        if self.softcap is not None:
            parts.append(f"soft-capped at {self.softcap:g}")
        return ", ".join(parts) or "as the output layer gives them"


_MULTIPLY = {"hyperclovax": "logits_scaling", "falcon_h1": "lm_head_multiplier"}
"""Families that multiply their logits by a config value (by model type: Granite divides by a key of the same
name, ``logits_scaling``)."""


def logit_map(config: dict[str, Any]) -> LogitMap:
    """The :class:`LogitMap` of a model's config (a multimodal config's ``text_config`` where it has one)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    model_type = str(text.get("model_type") or config.get("model_type") or "")

    def number(key: str) -> float | None:
        value = text.get(key, config.get(key))
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    multiply = number(_MULTIPLY[model_type]) if model_type in _MULTIPLY else number("logit_scale")
    divide = number("logits_scaling") if model_type not in _MULTIPLY else None
    softcap = number("final_logit_softcapping")
    return LogitMap(multiply=multiply, divide=divide, softcap=softcap or None)
