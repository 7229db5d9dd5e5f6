"""The training loop: token-weighted loss over ranks and micro-steps, eval, checkpoints, metrics."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class StepResult:
    """What one optimiser step leaves for logging, kept where it was computed: reading it on the host
    (and summing the loss over ranks) is a wait for the device and a collective, done only on the steps
    that are logged."""

    loss_sum: torch.Tensor
    """This rank's summed loss over its micro-steps (a scalar on the device)."""
    count: float
    """Learned tokens over every rank and micro-step: the global mean loss is the ranks' sum over this."""
    grad_norm: torch.Tensor | None
    """The gradients' total norm before clipping (the same on every rank), ``None`` without clipping."""
    real_tokens: int
    """Real (non-pad) tokens this rank trained on."""
    lr: float
    """The learning rate this step used."""

    def mean_loss(self) -> float:
        """The global mean loss (a collective: every rank calls it)."""
        summed = self.loss_sum.detach().reshape(1).to("cpu", torch.float64)
        dist.all_reduce(summed)
        return summed.item() / self.count


def train_step(model, optimizer, scheduler, micro_batches: list[dict[str, torch.Tensor]], device,
               max_grad_norm: float | None, world: int,
               before_update: Callable[[], None] | None = None,
               clock=None, global_count: float | None = None) -> StepResult:
    """One optimiser step over ``micro_batches``; ``global_count`` is the learned tokens of the whole
    global batch (every rank's micro-batches) where the caller knows it (:func:`micro_batches`), else it
    is summed over the ranks here, a collective.

    ``before_update`` runs just before the optimiser changes the weights (an async checkpoint's copy
    may still be reading them until then); ``clock`` (a :class:`trainer.metrics.RankClock`) times the update,
    which each rank does alone. Each rank scales its summed loss by world / global label count, so after FSDP averages gradients
    over ranks the step minimises the mean over every learned token of every rank and micro-step. The
    step has no collective of its own beyond the gradients' reduction (and the norm's under sharding):
    the label count is known beforehand, the loss stays on each rank until it is logged.
    """
    labels = [shifted_labels(b, "cpu") for b in micro_batches]  # counted and indexed in host memory
    if global_count is None:
        count = torch.tensor([float(sum(int((lab != IGNORE).sum()) for lab in labels))])
        dist.all_reduce(count)
        global_count = count.item()
    global_count = max(global_count, 1.0)
    totals = []  # kept on the device until the step is done: no wait for it between micro-steps
    can_defer = hasattr(model, "set_requires_gradient_sync")
    for i, (batch, lab) in enumerate(zip(micro_batches, labels, strict=True)):
        if can_defer:  # reduce gradients once, on the last micro-step
            model.set_requires_gradient_sync(i == len(micro_batches) - 1)
        totals.append(micro_step(model, batch, lab, device, world / global_count).float())
    grad_norm = clip_grad_norm(model, max_grad_norm) if max_grad_norm is not None else None
    lr = scheduler.get_last_lr()[0]
    if before_update is not None:
        before_update()
    with clock.update() if clock is not None else contextlib.nullcontext():
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    real = int(sum(int(b["real_tokens"]) for b in micro_batches))
    return StepResult(torch.stack(totals).sum(), global_count, grad_norm, real, lr)


def clip_grad_norm(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the gradients to ``max_norm`` in total (as ``clip_grad_norm_``); their norm before clipping,
    on the device. Sharded gradients are read as this rank's shards: the sum of their squares is reduced
    over the ranks that hold different shards, the step's one collective for the norm (through DTensor,
    ``clip_grad_norm_`` cost a dispatch per gradient and reduced the norm twice, once more to read it); a
    replicated model's norm needs none."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    group = _shard_group(grads)
    if group is False:  # gradients this path does not read (mixed meshes, several sharded dims)
        total = torch.nn.utils.get_total_norm(grads, foreach=True)
        total = total.full_tensor() if hasattr(total, "full_tensor") else total
        torch.nn.utils.clip_grads_with_norm_([p for p in model.parameters() if p.grad is not None], max_norm,
                                             total, foreach=True)
        return total
    local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
    norms = torch.stack(torch._foreach_norm(local))
    if group is None:
        total = torch.linalg.vector_norm(norms)
    else:
        squares = norms.square().sum()
        dist.all_reduce(squares, group=group)
        total = squares.sqrt()
    torch._foreach_mul_(local, (max_norm / (total + 1e-6)).clamp(max=1.0))
    return total


def _shard_group(grads: list[torch.Tensor]):
    """The process group over which gradients are sharded (``None``: none, they are whole on every rank;
    ``False``: not one this can read: several meshes or sharded dims, or shards off the mesh's device)."""
    if not grads or not hasattr(grads[0], "device_mesh"):
        return None if not any(hasattr(g, "device_mesh") for g in grads) else False
    mesh, placements = grads[0].device_mesh, grads[0].placements
    if any(getattr(g, "device_mesh", None) is not mesh or g.placements != placements
           or g.device.type != mesh.device_type for g in grads):
        return False
    dims = [i for i, p in enumerate(placements) if p.is_shard()]
    if len(dims) > 1:
        return False
    if not dims or mesh.size(dims[0]) == 1:
        return None
    return mesh.get_group(dims[0])


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


def learned_counts(rows: list[dict[str, torch.Tensor]]) -> list[int]:
    """Each row's learned tokens (labels the loss counts, as :func:`shifted_labels` leaves them): every
    rank holds every row, so any rank can count a whole global batch's without asking the others."""
    return [int(((row["labels"][1:] != IGNORE) & (row["position_ids"][1:] != 0)).sum()) for row in rows]


def micro_batches(order, rows, epoch: int, position: int, count: int, pad_id: int,
                  learned: list[int] | None = None):
    """``count`` micro-batches starting at (epoch, position), rolling into the next epoch if needed; the
    new (epoch, position); and with ``learned`` (:func:`learned_counts`) the learned tokens of all ranks'
    rows in these global micro-batches (the loss's denominator), else ``None``."""
    out = []
    total = 0
    for _ in range(count):
        if position >= order.batches_per_epoch:
            epoch, position = epoch + 1, 0
        out.append(collate([rows[i] for i in order.indices(epoch, position)], pad_id))
        if learned is not None:
            total += sum(learned[i] for i in order.global_indices(epoch, position))
        position += 1
    return out, epoch, position, (float(total) if learned is not None else None)
