"""AdamW and the learning-rate schedule: linear warmup, then cosine, linear or constant."""

from __future__ import annotations

import math
import re

import torch

from trainer.wire.config import OptimConfig

NO_DECAY_NAMES = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")
"""Hugging Face ``Trainer``'s rule (``get_decay_parameter_names``), matched on the lower-cased dotted
name: biases and normalisation weights (``input_layernorm``, ``model.norm``, ``q_norm``...); the
parameters of ``nn.LayerNorm`` modules are left out whatever their names (GPT-2's ``ln_1``)."""


def no_decay_names(model: torch.nn.Module) -> set[str]:
    """Names of the parameters weight decay skips: biases and normalisation weights."""
    names = {f"{module_name}.{name}" if module_name else name
             for module_name, module in model.named_modules() if isinstance(module, torch.nn.LayerNorm)
             for name, _ in module.named_parameters(recurse=False)}
    return names | {name for name, _ in model.named_parameters() if NO_DECAY_NAMES.search(name.lower())}


def param_groups(model: torch.nn.Module, cfg: OptimConfig) -> list[dict]:
    """One group for every parameter, or with weight decay two: decayed, and biases and norm weights
    undecayed (unless ``decay_bias_and_norm``)."""
    named = list(model.named_parameters())
    if not cfg.weight_decay or cfg.decay_bias_and_norm:
        return [{"params": [p for _, p in named], "weight_decay": cfg.weight_decay}]
    skip = no_decay_names(model)
    groups = [{"params": [p for n, p in named if (n in skip) is spared],
               "weight_decay": 0.0 if spared else cfg.weight_decay} for spared in (False, True)]
    return [g for g in groups if g["params"]]


def build_optimizer(model: torch.nn.Module, lr: float, cfg: OptimConfig, device: torch.device):
    # One kernel per step for all the parameters (torch has it for CPU and CUDA tensors since 2.4; the
    # Hugging Face Trainer's default too): on CPU 3-5x faster than the loop or foreach path (11M
    # parameters: ~40 against 120-190 ms a step), and one dispatch instead of a dozen under DTensor.
    fused = cfg.fused if cfg.fused is not None else device.type in ("cuda", "cpu")
    return torch.optim.AdamW(param_groups(model, cfg), lr=lr, betas=cfg.betas, eps=cfg.eps,
                             weight_decay=cfg.weight_decay, fused=fused or None)


def decay_note(optimizer: torch.optim.Optimizer) -> str | None:
    """One line saying what weight decay applies to (``None`` without weight decay), counting the tensors
    that train (a LoRA run's frozen base weights are in the groups, and never updated)."""
    decayed = [g for g in optimizer.param_groups if g["weight_decay"]]
    if not decayed:
        return None

    def trained(groups) -> int:
        return sum(p.requires_grad for g in groups for p in g["params"])

    spared = trained(g for g in optimizer.param_groups if not g["weight_decay"])
    if not spared:
        return f"weight decay: {decayed[0]['weight_decay']:g} on every parameter (optim.decay_bias_and_norm)"
    return (f"weight decay: {decayed[0]['weight_decay']:g} on {trained(decayed)} weight tensors; {spared} bias and "
            "norm tensors not decayed (as Hugging Face Trainer)")


def resume_refusal(saved_optimizer: dict, optimizer: torch.optim.Optimizer) -> str | None:
    """Why a checkpoint's optimiser state cannot be restored into ``optimizer``: its parameter groups are
    laid out otherwise (weight decay with biases and norm weights in one group or in their own), which
    torch would restore with the wrong settings per group. ``None`` when they match."""
    saved = [len(g["params"]) for g in saved_optimizer.get("param_groups", [])]
    now = [len(g["params"]) for g in optimizer.param_groups]
    if saved == now:
        return None
    return ("parameters.optim.decay_bias_and_norm: the checkpoint's optimiser keeps its parameters in "
            f"{len(saved)} group{'s' if len(saved) != 1 else ''} ({'/'.join(map(str, saved))} tensors), this run in "
            f"{len(now)} ({'/'.join(map(str, now))}): set decay_bias_and_norm: {str(len(saved) == 1).lower()} as "
            "when it was saved (or weight_decay: 0), or checkpoint.resume: never to start over")


def lr_factor(step: int, total: int, cfg: OptimConfig) -> float:
    """Multiplier of the peak learning rate at optimiser step ``step`` (0-based) of ``total``."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, total - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    if cfg.schedule == "linear":
        decay = 1.0 - progress
    else:
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * decay


def build_scheduler(optimizer, total_steps: int, cfg: OptimConfig):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total_steps, cfg))


def move_schedule(scheduler, step: int) -> None:
    """Put the schedule at ``step`` (after a resume that rescaled the step count)."""
    scheduler.last_epoch = step
    for group, base in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, strict=True):
        group["lr"] = base * scheduler.lr_lambdas[0](step)
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
