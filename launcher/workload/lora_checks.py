"""What ``validate`` can say of a workload's ``parameters.lora`` before anything runs: a target the model
has no layer for (named at its line, once the model's weights are on this machine), and QLoRA asked of
nodes without CUDA."""

from __future__ import annotations

from pathlib import Path

from launcher.workload.topology import Finding
from trainer.wire.config import TrainerConfig
from trainer.wire.lora_targets import layer_paths, leaf_names, matches

_P = ("parameters", "lora")


def lora_findings(cfg: TrainerConfig, compute_kind: str, base_dir: Path | None) -> list[Finding]:
    if cfg.lora is None:
        return []
    out: list[Finding] = []
    if cfg.lora.quantize is not None and compute_kind == "cpu":
        out.append(Finding((*_P, "quantize"), "error",
                           f"{cfg.lora.quantize} quantization runs through bitsandbytes on CUDA, and this workload's "
                           "nodes are CPU-only", "remove lora.quantize (LoRA trains on CPU), or run on GPU nodes"))
    targets = cfg.lora.target_modules if isinstance(cfg.lora.target_modules, list) else []
    if not targets and not cfg.lora.modules_to_save:
        return out
    paths = layer_paths(cfg.model_name, base_dir)
    if paths is None:  # the model is not on this machine: the trainer names it at start
        return out
    named = f"its layers are named: {', '.join(leaf_names(paths))}"
    for key, names in (("target_modules", targets), ("modules_to_save", cfg.lora.modules_to_save or [])):
        hint = named + (" (or use target_modules: all-linear)" if key == "target_modules" else "")
        for i, name in enumerate(names):
            if not matches(name, paths):
                out.append(Finding((*_P, key, i), "error", f"{cfg.model_name} has no layer named '{name}'", hint))
    return out
