"""The training loop: token-weighted loss over ranks and micro-steps, eval, checkpoints, metrics."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from trainer import learned_logits, packed_sdpa, router_loss
from trainer.data import IGNORE, collate, needs_segment_mask
from trainer.model_family import layer_windows
from trainer.packed_masks import packed_attention_mask


def forward_logits(model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device,
                   keep: torch.Tensor | None = None) -> torch.Tensor:
    """Logits with a block-diagonal causal mask built from ``position_ids`` in the form the model's
    attention implementation reads, so packed examples never attend to each other (an explicit mask:
    exact on every transformers version), with each layer type's sliding window (one mask per layer
    type where layers differ: :func:`trainer.packed_masks.packed_attention_mask`). A batch with no
    learned token after a boundary needs only causal attention and passes no mask (flash kernel;
    transformers applies the windows). With ``packed_sdpa`` on rows long enough there is no mask: each
    example of each row is its own causal call. With ``keep`` (flat positions, see
    :func:`trainer.learned_logits.learned_positions`) only those positions' logits, ``[len(keep), vocab]``."""
    return _forward(model, batch, device, keep, with_router_loss=False)[0]


def _forward(model: nn.Module, batch: dict[str, torch.Tensor], device, keep: torch.Tensor | None,
             with_router_loss: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits as :func:`forward_logits` says, and the router's load-balancing loss when asked (a
    forward that asks passes no 4-D mask: :mod:`trainer.router_loss` says why)."""
    ids = to_device(batch["input_ids"], device)
    pos = to_device(batch["position_ids"], device)
    extra = {}
    if router_loss.has_router(model.config):  # the config's own setting never decides alone
        extra["output_router_logits"] = with_router_loss
    if with_router_loss:  # no cache: transformers finds packed examples only without one
        extra["use_cache"] = False
        padding = router_loss.padding_mask(batch)
        extra["attention_mask"] = None if padding is None else to_device(padding, device)
    if _per_example(model, batch, with_router_loss):
        with packed_sdpa.examples(batch["position_ids"]):
            return _outputs(model, keep, lambda: model(input_ids=ids, position_ids=pos, **extra))
    if not with_router_loss:
        implementation = model.config._attn_implementation
        if implementation == packed_sdpa.NAME:
            implementation = "sdpa"  # rows too short to pay for a call per example: the mask
        extra["attention_mask"] = (packed_attention_mask(implementation, pos, attention_layers(model.config))
                                   if needs_segment_mask(batch) else None)
    return _outputs(model, keep, lambda: model(input_ids=ids, position_ids=pos, **extra))


def attention_layers(config) -> dict[str, int | None]:
    """Each layer type of the model and its sliding window (:func:`trainer.model_family.layer_windows`),
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
    per_example = _per_example(model, batch, router_weight is not None)
    rows = packed_sdpa.examples(batch["position_ids"]) if per_example else contextlib.nullcontext()
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


def _per_example(model: nn.Module, batch: dict[str, torch.Tensor], with_router_loss: bool = False) -> bool:
    """Whether the rows go through sdpa once per example: with that implementation, on rows long enough
    to pay for it, or on any row of a forward that asks for the router loss (it gets no 4-D mask, and
    for this implementation transformers builds none)."""
    return (model.config._attn_implementation == packed_sdpa.NAME
            and (with_router_loss or batch["position_ids"].shape[-1] >= packed_sdpa.MIN_ROW_LENGTH))


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
    """What one optimiser step reports."""

    loss: float
    """Mean cross-entropy over every learned token of every rank and micro-step."""
    grad_norm: float | None
    real_tokens: int
    """Tokens of this rank's examples (padding left out)."""
    lr: float
    """The learning rate this step used."""
    router_aux_loss: float | None = None
    """A mixture-of-experts model's load-balancing loss, mean over ranks and micro-steps, before its
    coefficient (``None``: not trained with one)."""


def train_step(model, optimizer, scheduler, micro_batches: list[dict[str, torch.Tensor]], device,
               max_grad_norm: float | None, world: int,
               before_update: Callable[[], None] | None = None,
               clock=None) -> StepResult:
    """One optimiser step over ``micro_batches``.

    ``before_update`` runs just before the optimiser changes the weights (an async checkpoint's copy
    may still be reading them until then); ``clock`` (a :class:`trainer.metrics.RankClock`) times the
    update, which each rank does alone. Each rank scales its summed loss by world / global label count,
    so after FSDP averages gradients over ranks the step minimises the mean over every learned token of
    every rank and micro-step. A
    router loss is weighted by its coefficient over the micro-steps: after that average, the step adds
    the coefficient times its mean over every micro-batch, as transformers adds it to each batch's loss.
    """
    labels = [shifted_labels(b, "cpu") for b in micro_batches]  # counted and indexed in host memory
    count = torch.tensor([float(sum(int((lab != IGNORE).sum()) for lab in labels))])
    dist.all_reduce(count)
    global_count = max(count.item(), 1.0)
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
    router_sum = torch.stack(routers).sum() if routers else torch.zeros((), device=totals[0].device)
    summed = torch.stack([torch.stack(totals).sum(), router_sum]).cpu()
    dist.all_reduce(summed)
    real = int(sum(int(b["real_tokens"]) for b in micro_batches))
    router_mean = float(summed[1]) / (world * len(micro_batches)) if routers else None
    return StepResult(float(summed[0]) / global_count, grad_norm, real, lr, router_mean)


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
