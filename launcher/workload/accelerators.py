"""Accelerator names as ``air`` writes them (``GPU_8xH100``) and our ``CPU``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.workload.problems import did_you_mean

KNOWN_GPU_MODELS = ("H100", "H200", "B200", "A100", "A10", "A10G", "L4", "L40S", "V100", "T4", "MI300X")
GPU_MEMORY_GIB = {"H100": 79.6, "H200": 139.8, "B200": 178.4, "A100": 79.2, "A10": 22.5, "A10G": 22.3, "L4": 22.0,
                  "L40S": 44.4, "V100": 31.7, "T4": 14.6, "MI300X": 191.5}
"""Each model's memory as its driver reports it (GiB), for a memory prediction before any node is asked;
A100 and V100 come in two sizes: the larger is taken (the doctor reads the cards)."""
TWO_SIZES = frozenset({"A100", "V100"})
_GPU = re.compile(r"^GPU_(\d+)x([A-Za-z0-9]+)$")


@dataclass(frozen=True)
class Accelerator:
    kind: str  # "gpu" or "cpu"
    per_node: int | None = None
    model: str | None = None


def parse_accelerator(text: str) -> tuple[Accelerator | None, str, str]:
    """``(accelerator, message, hint)``: the parsed type, or ``None`` with why and what to write."""
    if text.upper() == "CPU":
        return Accelerator("cpu"), "", ""
    match = _GPU.match(text)
    if match is None:
        loose = re.match(r"^(?:gpu)?[_\s-]*(\d+)\s*[xX*]?\s*([A-Za-z0-9]+)$", text, re.IGNORECASE)
        hint = f"did you mean 'GPU_{loose.group(1)}x{loose.group(2).upper()}'?" if loose else (
            "write GPU_<N>x<MODEL> (e.g. GPU_8xH100) or CPU")
        return None, f"unknown accelerator type '{text}'", hint
    count, model = int(match.group(1)), match.group(2)
    if count < 1:
        return None, "a node needs at least one GPU", "e.g. GPU_1xA10"
    hint = ""
    if model not in KNOWN_GPU_MODELS:
        hint = did_you_mean(model, KNOWN_GPU_MODELS)
    return Accelerator("gpu", count, model), ("" if not hint else f"unknown GPU model '{model}'"), hint
