"""What a model's layers are called, read from its weight files without torch (standard library only).

``fsdp-tui validate`` (no torch on the operator's machine) names a ``parameters.lora.target_modules`` entry
that the model does not have, at its line, once the model is known: a local folder, or a hub id already in
the Hugging Face cache. The layers' names come from the tensor names of its safetensors files (the index,
else each file's header), with a mixture of experts' fused expert weights (``gate_up_proj``, ``down_proj``:
a parameter of the experts, kept fused or one tensor per expert); a name matches as PEFT matches it (the
layer's path is the name or ends in ``.name``). The trainer applies PEFT's own rule at start for everything
this cannot see.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from trainer.wire.model_family import model_folder

_MAX_HEADER = 100 << 20


def layer_paths(model_name: str, base_dir: Path | None = None) -> list[str] | None:
    """Every layer that holds a weight (``model.layers.0.self_attn.q_proj``), or ``None`` when the model's
    weight files are not on this machine (not an error here: the trainer checks at start)."""
    folder = model_folder(model_name, base_dir)
    if folder is None:
        return None
    names: set[str] = set()
    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file():
            names = set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}))
        else:
            for path in sorted(folder.glob("*.safetensors")):
                names |= _header_names(path)
    except (OSError, ValueError, AttributeError, struct.error):
        return None
    paths = {n.rsplit(".", 1)[0] for n in names if n.endswith(".weight")}
    paths |= {n for n in names if not n.endswith((".weight", "bias"))}  # fused expert weights: a parameter, no layer
    return sorted(paths | _fused(paths)) or None


_PER_EXPERT = re.compile(r"^(.*\.experts)\.\d+\.(gate_proj|up_proj|down_proj|w1|w2|w3)$")
_FUSED = {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "w1": "gate_up_proj", "w3": "gate_up_proj",
          "down_proj": "down_proj", "w2": "down_proj"}


def _fused(paths: set[str]) -> set[str]:
    """The fused expert weights transformers builds from files that keep one tensor per expert
    (``mlp.experts.0.gate_proj`` and ``up_proj`` -> ``mlp.experts.gate_up_proj``): a target may name those."""
    out = set()
    for path in paths:
        found = _PER_EXPERT.match(path)
        if found:
            out.add(f"{found.group(1)}.{_FUSED[found.group(2)]}")
    return out


def _header_names(path: Path) -> set[str]:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        if size > _MAX_HEADER:
            raise ValueError("not a safetensors header")
        header = json.loads(f.read(size))
    return {k for k in header if k != "__metadata__"}


def matches(name: str, paths: list[str]) -> bool:
    """Whether ``name`` names a layer as PEFT matches a target: the whole path, or its last parts."""
    return any(p == name or p.endswith(f".{name}") for p in paths)


def leaf_names(paths: list[str]) -> list[str]:
    """The distinct last names of the layers (what a target usually names), sorted."""
    return sorted({p.rsplit(".", 1)[-1] for p in paths})
