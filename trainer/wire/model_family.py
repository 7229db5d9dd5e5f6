"""What a model family can take, read from its ``config.json`` alone (standard library only).

The launcher uses this to refuse a workload before anything starts, and the trainer to pick its
defaults, so both apply one rule. Packing restarts ``position_ids`` at each example and gives each
attention layer a mask closed across examples (with the layer's sliding window: :func:`layer_windows`).
That keeps examples apart only in a model whose tokens meet in attention alone, and which reads
positions from ``position_ids``. Packing is refused for a model that derives positions from the
attention mask instead (ALiBi without position ids: BLOOM, MPT, Falcon with ``alibi``: it would see one
long example per row) or counts them along the row (BART-style decoders: ``NO_POSITION_IDS``), for a model that carries a state along the sequence (Mamba and other state-space
or linear-attention layers, RWKV, hybrids such as Jamba or Qwen3-Next: the state flows from one example
into the next), and for layer types whose masks are other than causal or a sliding window (Llama 4's
chunked attention).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_NO_POSITION_IDS = {"bloom": "BLOOM", "mpt": "MPT"}

NO_POSITION_IDS = frozenset({
    "bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "cpmant", "marian", "mbart", "moss_transcribe_diarize",
    "musicgen", "musicgen_melody", "mvp", "pegasus", "plbart", "prophetnet", "roformer", "trocr", "whisper", "xlnet",
})
"""Causal LMs whose forward takes no ``position_ids`` (decoders of encoder-decoder families and others that
count positions along the row themselves; the trainer also reads the forward's signature)."""

STATEFUL = frozenset({
    "bailing_hybrid", "bamba", "deepseek_v4", "falcon_h1", "falcon_mamba", "glm5_next", "granitemoehybrid",
    "inkling_text", "inkling2_text", "inkling2_loop_text", "jamba", "kimi_linear", "lara_mini", "lfm2",
    "lfm2_moe", "lfm3", "mamba", "mamba2", "minimax", "nemotron_h", "olmo_hybrid", "qwen3_5", "qwen3_5_moe",
    "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "qwen4_exp", "qwen4_exp_text", "recurrent_gemma", "rwkv",
    "xlstm", "zamba", "zamba2", "zaya",
})
"""Families whose layers carry a state along the sequence (transformers marks their models ``_is_stateful``
up to 5.24, and caches their layer types as a recurrent state from 5.25; the trainer also asks transformers,
for families newer than this list: ``trainer.model.build.carries_state``)."""

ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention"})
"""The ``layer_types`` entries packed rows can be masked for: causal, or causal within a window."""


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


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (a multimodal model nests it as ``text_config``)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def layer_windows(config: dict[str, Any]) -> dict[str, int | None]:
    """Each layer type of the model and the sliding window its layers keep (``None``: the whole
    example), as transformers' models read them: ``layer_types`` where the config has them, a window
    for ``sliding_attention`` layers only; else one type for every layer, with ``sliding_window`` unless
    ``use_sliding_window`` is false (Mistral v0.1, Phi-3, Starcoder2, Mixtral)."""
    text = text_config(config)
    window = text.get("sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        window = None
    if text.get("use_sliding_window") is False:
        window = None
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        return {str(kind): (window if kind == "sliding_attention" else None) for kind in dict.fromkeys(types)}
    return {"full_attention": window}


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
    text_type = str(text_config(config or {}).get("model_type", "")).lower()
    if model_type in NO_POSITION_IDS:
        return (f"{model_type} takes no position_ids: positions would run on from one packed example into the "
                "next")
    if model_type in STATEFUL or text_type in STATEFUL:
        return (f"{model_type or text_type} carries a state along the sequence (state-space or linear-attention "
                "layers): packed examples would see each other")
    other = sorted(set(layer_windows(config or {})) - ATTENTION_LAYER_TYPES)
    if other:
        return (f"its layers of type {', '.join(other)} cannot be masked per example (packing keeps examples apart "
                "for full and sliding-window attention only)")
    return None
