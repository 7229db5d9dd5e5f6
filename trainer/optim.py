"""AdamW and the learning-rate schedule: linear warmup, then cosine, linear or constant."""

from __future__ import annotations

import math

import torch

from trainer.config import OptimConfig


def build_optimizer(model: torch.nn.Module, lr: float, cfg: OptimConfig, device: torch.device):
    # One kernel per step for all the parameters (torch has it for CPU and CUDA tensors since 2.4; the
    # Hugging Face Trainer's default too): on CPU 3-5x faster than the loop or foreach path (11M
    # parameters: ~40 against 120-190 ms a step), and one dispatch instead of a dozen under DTensor.
    fused = cfg.fused if cfg.fused is not None else device.type in ("cuda", "cpu")
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=cfg.betas, eps=cfg.eps,
                             weight_decay=cfg.weight_decay, fused=fused or None)


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
