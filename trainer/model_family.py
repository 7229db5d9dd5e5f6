"""What a model family can take, read from its ``config.json`` alone (standard library only).

The launcher uses this to refuse a workload before anything starts, and the trainer to pick its
defaults, so both apply one rule. Packing restarts ``position_ids`` at each example; a model that
derives positions from the attention mask instead (ALiBi without position ids: BLOOM, MPT, Falcon
with ``alibi``) would see one long example per row, so packing is refused for it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_NO_POSITION_IDS = {"bloom": "BLOOM", "mpt": "MPT"}


def read_config(model_name: str, base_dir: Path | None = None) -> dict[str, Any] | None:
    """The model's ``config.json`` as a dict: from a local folder (relative to ``base_dir`` when given),
    else from the Hugging Face cache of a hub id; ``None`` when neither has it (not an error here)."""
    folder = model_folder(model_name, base_dir)
    return _load(folder / "config.json") if folder is not None else None


def model_folder(model_name: str, base_dir: Path | None = None) -> Path | None:
    """The folder holding the model's ``config.json``: a local folder (relative to ``base_dir`` when
    given), else the Hugging Face cache's snapshot of a hub id; ``None`` when neither has it."""
    candidates = [Path(os.path.expanduser(model_name))]
    if base_dir is not None:
        candidates.append(base_dir / os.path.expanduser(model_name))
    for folder in candidates:
        if (folder / "config.json").is_file():
            return folder
    if model_name.count("/") == 1 and not model_name.startswith((".", "/", "~")):
        hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface"))
                   / "hub").expanduser()
        snapshots = hub / f"models--{model_name.replace('/', '--')}" / "snapshots"
        if snapshots.is_dir():
            for snap in sorted(snapshots.iterdir()):
                if (snap / "config.json").is_file():
                    return snap
    return None


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def packing_refusal(config: dict[str, Any] | None, model_name: str = "") -> str | None:
    """Why this model cannot train on packed rows, or ``None`` when it can (or is unknown and not named
    like a family that cannot)."""
    model_type = str((config or {}).get("model_type", "")).lower()
    if not model_type:
        lowered = model_name.lower()
        model_type = next((t for t in _NO_POSITION_IDS if t in lowered.rsplit("/", 1)[-1]), "")
    if model_type in _NO_POSITION_IDS:
        return (f"{_NO_POSITION_IDS[model_type]} uses ALiBi without position ids: packed examples would "
                "attend to each other")
    if model_type == "falcon" and (config or {}).get("alibi"):
        return "this Falcon model uses ALiBi without position ids: packed examples would attend to each other"
    return None
