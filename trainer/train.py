"""The training loop: token-weighted loss over ranks and micro-steps, eval, checkpoints, metrics."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from trainer import learned_logits, packed_sdpa
from trainer.data import IGNORE, collate, needs_segment_mask
from trainer.packed_masks import packed_mask


def forward_logits(model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device,
                   keep: torch.Tensor | None = None) -> torch.Tensor:
    """Logits with a block-diagonal causal mask built from ``position_ids`` in the form the model's
    attention implementation reads, so packed examples never attend to each other (an explicit mask:
    exact on every transformers version). A batch with no learned token after a boundary needs only
    causal attention and passes no mask (flash kernel). With ``packed_sdpa`` on rows long enough there
    is no mask: each example of each row is its own causal call. With ``keep`` (flat positions, see
    :func:`trainer.learned_logits.learned_positions`) only those positions' logits, ``[len(keep), vocab]``."""
    ids = to_device(batch["input_ids"], device)
    pos = to_device(batch["position_ids"], device)
    if _per_example(model, batch):
        with packed_sdpa.examples(batch["position_ids"]):
            return _logits(model, keep, lambda: model(input_ids=ids, position_ids=pos).logits)
    implementation = model.config._attn_implementation
    if implementation == packed_sdpa.NAME:
        implementation = "sdpa"  # rows too short to pay for a call per example: the mask
    mask = packed_mask(implementation, pos) if needs_segment_mask(batch) else None
    return _logits(model, keep, lambda: model(input_ids=ids, position_ids=pos, attention_mask=mask).logits)


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    """``t`` on ``device``; to a GPU from pinned memory without waiting (from pageable memory the copy
    would wait for the device to finish its queued work at every micro-step)."""
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _logits(model: nn.Module, keep: torch.Tensor | None, forward) -> torch.Tensor:
    return forward() if keep is None else learned_logits.logits_at(model, keep, forward)


def micro_step(model: nn.Module, batch: dict[str, torch.Tensor], labels: torch.Tensor, device,
               scale: float) -> torch.Tensor:
    """Forward and backward of one micro-batch (its summed loss times ``scale``); the summed loss.
    Blocks under activation checkpointing run their forward again during backward: per-example
    attention keeps seeing this batch's examples until backward is done."""
    rows = packed_sdpa.examples(batch["position_ids"]) if _per_example(model, batch) else contextlib.nullcontext()
    with rows:
        logits, targets = learned(model, batch, labels, device)
        total = nn.functional.cross_entropy(logits.float(), targets, reduction="sum")
        (total * scale).backward()
    return total.detach()


def learned(model: nn.Module, batch: dict[str, torch.Tensor], labels: torch.Tensor,
            device) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits of the learned positions only and their targets, row by row in order: the output
    layer and the cross-entropy skip prompts, padding and each row's last position. The positions are
    found from the labels in host memory (on a GPU that would wait for the device at every micro-step)."""
    labels = labels.cpu()
    keep = learned_logits.learned_positions(labels).to(device, non_blocking=True)
    return forward_logits(model, batch, device, keep), labels[labels != IGNORE].to(device, non_blocking=True)


def _per_example(model: nn.Module, batch: dict[str, torch.Tensor]) -> bool:
    return (model.config._attn_implementation == packed_sdpa.NAME
            and batch["position_ids"].shape[-1] >= packed_sdpa.MIN_ROW_LENGTH)


def shifted_labels(batch: dict[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """Labels aligned with the logit that predicts them; the first token of each example is never
    predicted from the previous example (packing)."""
    labels = batch["labels"][:, 1:].clone()
    labels[batch["position_ids"][:, 1:] == 0] = IGNORE
    return labels.to(device)


def loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy over learned positions, and how many there are."""
    flat = logits[:, :-1].float().reshape(-1, logits.shape[-1])
    total = nn.functional.cross_entropy(flat, labels.reshape(-1), ignore_index=IGNORE, reduction="sum")
    return total, int((labels != IGNORE).sum())


def train_step(model, optimizer, scheduler, micro_batches: list[dict[str, torch.Tensor]], device,
               max_grad_norm: float | None, world: int,
               before_update: Callable[[], None] | None = None,
               clock=None) -> tuple[float, float | None, int, float]:
    """One optimiser step over ``micro_batches``; returns (global mean loss, grad norm, real tokens here,
    the learning rate this step used).

    ``before_update`` runs just before the optimiser changes the weights (an async checkpoint's copy
    may still be reading them until then); ``clock`` (a :class:`trainer.metrics.RankClock`) times the update,
    which each rank does alone. Each rank scales its summed loss by world / global label count, so after FSDP averages gradients
    over ranks the step minimises the mean over every learned token of every rank and micro-step.
    """
    labels = [shifted_labels(b, "cpu") for b in micro_batches]  # counted and indexed in host memory
    count = torch.tensor([float(sum(int((lab != IGNORE).sum()) for lab in labels))])
    dist.all_reduce(count)
    global_count = max(count.item(), 1.0)
    totals = []  # kept on the device until the step is done: no wait for it between micro-steps
    can_defer = hasattr(model, "set_requires_gradient_sync")
    for i, (batch, lab) in enumerate(zip(micro_batches, labels, strict=True)):
        if can_defer:  # reduce gradients once, on the last micro-step
            model.set_requires_gradient_sync(i == len(micro_batches) - 1)
        totals.append(micro_step(model, batch, lab, device, world / global_count).float())
    grad_norm = None
    if max_grad_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    lr = scheduler.get_last_lr()[0]
    if before_update is not None:
        before_update()
    with clock.update() if clock is not None else contextlib.nullcontext():
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    summed = torch.stack(totals).sum().reshape(1).cpu()
    dist.all_reduce(summed)
    real = int(sum(int(b["real_tokens"]) for b in micro_batches))
    return summed.item() / global_count, grad_norm, real, lr


@torch.no_grad()
def evaluate(model, batches, device, with_exact_match: bool) -> tuple[float, float | None]:
    """Mean eval loss over every learned token of every rank; exact match of answers (teacher-forced
    greedy predictions equal to the whole answer) when asked."""
    model.eval()
    stats = torch.zeros(4, dtype=torch.float64)  # loss sum, tokens, exact answers, answers
    # Eagerly: evaluation without gradients would be one more compiled variant of every block, counted
    # against the recompile limit that training's own variants need.
    with _eager():
        _evaluate_batches(model, batches, device, with_exact_match, stats)
    dist.all_reduce(stats)
    model.train()
    if stats[1] == 0:
        return math.nan, None
    exact = float(stats[2] / stats[3]) if with_exact_match and stats[3] > 0 else None
    return float(stats[0] / stats[1]), exact


def _evaluate_batches(model, batches, device, with_exact_match: bool, stats: torch.Tensor) -> None:
    for batch in batches:
        labels = shifted_labels(batch, "cpu")
        logits, targets = learned(model, batch, labels, device)
        stats[0] += float(nn.functional.cross_entropy(logits.float(), targets, reduction="sum"))
        stats[1] += targets.numel()
        if with_exact_match:
            row = (labels != IGNORE).nonzero()[:, 0]  # the row of each learned position
            wrong = torch.zeros(labels.shape[0]).index_add_(0, row, (logits.argmax(-1) != targets).float().cpu())
            answered = (labels != IGNORE).any(-1)
            stats[2] += float((answered & (wrong == 0)).sum())
            stats[3] += float(answered.sum())


def _eager():
    """Compiled blocks run eagerly inside (``torch.compiler.set_stance``, torch 2.6+)."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    return set_stance("force_eager") if set_stance is not None else contextlib.nullcontext()


def micro_batches(order, rows, epoch: int, position: int, count: int, pad_id: int):
    """``count`` micro-batches starting at (epoch, position), rolling into the next epoch if needed."""
    out = []
    for _ in range(count):
        if position >= order.batches_per_epoch:
            epoch, position = epoch + 1, 0
        out.append(collate([rows[i] for i in order.indices(epoch, position)], pad_id))
        position += 1
    return out, epoch, position
