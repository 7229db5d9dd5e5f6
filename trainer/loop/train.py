"""The training loop: token-weighted loss over ranks and micro-steps, eval, checkpoints, metrics."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from trainer.data.rows import IGNORE, collate, needs_segment_mask
from trainer.model import learned_logits, packed_sdpa, router_loss
from trainer.model.packed_masks import packed_attention_mask
from trainer.wire.model_family import layer_windows


def forward_logits(model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device,
                   keep: torch.Tensor | None = None) -> torch.Tensor:
    """Logits with a block-diagonal causal mask built from ``position_ids`` in the form the model's
    attention implementation reads, so packed examples never attend to each other (an explicit mask:
    exact on every transformers version), with each layer type's sliding window (one mask per layer
    type where layers differ: :func:`trainer.model.packed_masks.packed_attention_mask`). A batch with no
    learned token after a boundary needs only causal attention and passes no mask (flash kernel;
    transformers applies the windows). With ``packed_sdpa`` on rows long enough there is no mask: each
    example of each row is its own causal call. With ``keep`` (flat positions, see
    :func:`trainer.model.learned_logits.learned_positions`) only those positions' logits, ``[len(keep), vocab]``."""
    return _forward(model, batch, device, keep, with_router_loss=False)[0]


def _forward(model: nn.Module, batch: dict[str, torch.Tensor], device, keep: torch.Tensor | None,
             with_router_loss: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits as :func:`forward_logits` says, and the router's load-balancing loss when asked: the layers
    see what any forward gives them, the loss counts the rows' real tokens (:mod:`trainer.model.router_loss`)."""
    ids = to_device(batch["input_ids"], device)
    pos = to_device(batch["position_ids"], device)
    extra = {}
    if router_loss.has_router(model.config):  # the config's own setting never decides alone
        extra["output_router_logits"] = with_router_loss
    counted = contextlib.nullcontext()
    if with_router_loss:
        extra["use_cache"] = False
        counted = router_loss.counting(model, to_device(router_loss.real_tokens(batch), device))
    with counted:
        if _per_example(model, batch):
            with packed_sdpa.examples(batch["position_ids"]):
                return _outputs(model, keep, lambda: model(input_ids=ids, position_ids=pos, **extra))
        implementation = model.config._attn_implementation
        if implementation == packed_sdpa.NAME:
            implementation = "sdpa"  # rows too short to pay for a call per example: the mask
        extra["attention_mask"] = (packed_attention_mask(implementation, pos, attention_layers(model.config))
                                   if needs_segment_mask(batch) else None)
        return _outputs(model, keep, lambda: model(input_ids=ids, position_ids=pos, **extra))


def attention_layers(config) -> dict[str, int | None]:
    """Each layer type of the model and its sliding window (:func:`trainer.wire.model_family.layer_windows`),
    read from the config's attributes (cheap at every forward)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return layer_windows({key: getattr(text, key, None)
                          for key in ("sliding_window", "use_sliding_window", "layer_types")})


def _outputs(model: nn.Module, keep: torch.Tensor | None, call) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The logits (at ``keep`` only, when given) and the output's ``aux_loss`` (``None`` if it has none)."""
    outputs = []

    def forward() -> torch.Tensor:
        outputs.append(call())
        return outputs[-1].logits

    logits = forward() if keep is None else learned_logits.logits_at(model, keep, forward)
    aux = getattr(outputs[-1], "aux_loss", None)
    return logits, aux if isinstance(aux, torch.Tensor) else None  # a model with no router logits gives 0


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    """``t`` on ``device``; to a GPU from pinned memory without waiting (from pageable memory the copy
    would wait for the device to finish its queued work at every micro-step)."""
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def micro_step(model: nn.Module, batch: dict[str, torch.Tensor], labels: torch.Tensor, device,
               scale: float, router_weight: float | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Forward and backward of one micro-batch: its summed loss times ``scale``, plus the router's
    load-balancing loss times ``router_weight`` when given (a mixture-of-experts model that trains with
    it). Returns the summed loss and the router loss (``None`` without one), both detached.
    Blocks under activation checkpointing run their forward again during backward: per-example
    attention keeps seeing this batch's examples until backward is done."""
    rows = packed_sdpa.examples(batch["position_ids"]) if _per_example(model, batch) else contextlib.nullcontext()
    with rows:
        logits, targets, aux = _learned(model, batch, labels, device, router_weight is not None)
        total = nn.functional.cross_entropy(logits.float(), targets, reduction="sum")
        objective = total * scale
        if aux is not None:
            objective = objective + aux.float() * router_weight
        objective.backward()
    return total.detach(), None if aux is None else aux.detach()


def learned(model: nn.Module, batch: dict[str, torch.Tensor], labels: torch.Tensor,
            device) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits of the learned positions only and their targets, row by row in order: the output
    layer and the cross-entropy skip prompts, padding and each row's last position. The positions are
    found from the labels in host memory (on a GPU that would wait for the device at every micro-step)."""
    logits, targets, _ = _learned(model, batch, labels, device, with_router_loss=False)
    return logits, targets


def _learned(model: nn.Module, batch: dict[str, torch.Tensor], labels: torch.Tensor, device,
             with_router_loss: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    labels = labels.cpu()
    keep = learned_logits.learned_positions(labels).to(device, non_blocking=True)
    logits, aux = _forward(model, batch, device, keep, with_router_loss)
    return logits, labels[labels != IGNORE].to(device, non_blocking=True), aux


def _per_example(model: nn.Module, batch: dict[str, torch.Tensor]) -> bool:
    """Whether the rows go through sdpa once per example: with that implementation, on rows long enough
    to pay for it."""
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
    router_sum: torch.Tensor | None = None
    """A mixture-of-experts model's load-balancing loss, this rank's sum over its micro-steps before its
    coefficient, on the device (``None``: not trained with one)."""
    micro_steps: int = 1

    def mean_loss(self) -> float:
        """The global mean loss (a collective: every rank calls it)."""
        summed = self.loss_sum.detach().reshape(1).to("cpu", torch.float64)
        dist.all_reduce(summed)
        return summed.item() / self.count

    def mean_router_aux_loss(self) -> float | None:
        """The router loss, mean over ranks and micro-steps (a collective where there is one)."""
        if self.router_sum is None:
            return None
        summed = self.router_sum.detach().reshape(1).to("cpu", torch.float64)
        dist.all_reduce(summed)
        return summed.item() / (dist.get_world_size() * self.micro_steps)


def train_step(model, optimizer, scheduler, micro_batches: list[dict[str, torch.Tensor]], device,
               max_grad_norm: float | None, world: int,
               before_update: Callable[[], None] | None = None,
               clock=None, global_count: float | None = None) -> StepResult:
    """One optimiser step over ``micro_batches``; ``global_count`` is the learned tokens of the whole
    global batch (every rank's micro-batches) where the caller knows it (:func:`micro_batches`), else it
    is summed over the ranks here, a collective.

    ``before_update`` runs just before the optimiser changes the weights (an async checkpoint's copy
    may still be reading them until then); ``clock`` (a :class:`trainer.loop.metrics.RankClock`) times the
    update, which each rank does alone. Each rank scales its summed loss by world / global label count,
    so after FSDP averages gradients over ranks the step minimises the mean over every learned token of
    every rank and micro-step. A router loss is weighted by its coefficient over the micro-steps: after
    that average, the step adds the coefficient times its mean over every micro-batch, as transformers
    adds it to each batch's loss. The step has no collective of its own beyond the gradients' reduction
    (and the norm's under sharding): the label count is known beforehand, the losses stay on each rank
    until they are logged.
    """
    labels = [shifted_labels(b, "cpu") for b in micro_batches]  # counted and indexed in host memory
    if global_count is None:
        count = torch.tensor([float(sum(int((lab != IGNORE).sum()) for lab in labels))])
        dist.all_reduce(count)
        global_count = count.item()
    global_count = max(global_count, 1.0)
    totals, routers = [], []  # kept on the device until the step is done: no wait between micro-steps
    coefficient = router_loss.coefficient(model)
    router_weight = coefficient / len(micro_batches) if coefficient is not None else None
    can_defer = hasattr(model, "set_requires_gradient_sync")
    for i, (batch, lab) in enumerate(zip(micro_batches, labels, strict=True)):
        if can_defer:  # reduce gradients once, on the last micro-step
            model.set_requires_gradient_sync(i == len(micro_batches) - 1)
        total, aux = micro_step(model, batch, lab, device, world / global_count, router_weight)
        totals.append(total.float())
        if aux is not None:
            routers.append(aux.float().to(total.device))
    grad_norm = clip_grad_norm(model, max_grad_norm) if max_grad_norm is not None else None
    lr = scheduler.get_last_lr()[0]
    if before_update is not None:
        before_update()
    with clock.update() if clock is not None else contextlib.nullcontext():
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    real = int(sum(int(b["real_tokens"]) for b in micro_batches))
    router_sum = torch.stack(routers).sum() if routers else None
    return StepResult(torch.stack(totals).sum(), global_count, grad_norm, real, lr, router_sum, len(micro_batches))


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
