"""A loss that became NaN or infinite, found where the loss is read anyway, and what ``training.on_nan``
does about it (:class:`trainer.wire.config.TrainingConfig`).

Each step's loss stays on the device until a logged step reads it (``StepResult.loss_sum``, one wait and
one gather in :meth:`trainer.loop.metrics.MetricsLogger.train_step`). So ``stop`` adds no wait and no
collective to an ordinary step:

- at a logged step the ranks' own losses are already gathered on every rank: each rank finds the same
  first non-finite one and the run stops there (every rank, at once, with the same line). A NaN at a step
  that is not logged is found at the next logged one: what ``stop`` costs is at most
  ``logging.every_steps - 1`` wasted steps, said in the line;
- a checkpoint is saved only once this rank's loss of that step and the weights about to be saved are
  finite on every rank (a pass over this rank's trainable shards and a gather of two numbers, at saves
  only, which wait for the device anyway). So no checkpoint after the NaN is ever written, and the newest
  whole checkpoint is the last one before it: the run's safe step.

``skip_step`` must know before each update whether to make it: it reads the loss and the gradients' norm
every step (a wait for the device and a gather of two numbers per step), skips that step's update (the
schedule still moves on) and stops after :data:`SKIP_LIMIT` steps skipped in a row. ``continue`` says the
first one and trains on (the weights are then NaN: every later loss too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from trainer.loop.metrics import MetricsLogger
from trainer.loop.parts import Saves
from trainer.parallel import Dist
from trainer.wire.protocol import MetricRecord

KIND_NONFINITE = "nonfinite"
"""The metrics record of a non-finite loss (``extra``: ``rank``, ``value``, ``action``)."""
SKIP_LIMIT = 10
"""``skip_step`` stops the run after this many steps skipped in a row: the cause is not one bad batch."""


class NonFiniteLoss(RuntimeError):
    """The run stopped on a non-finite loss (``training.on_nan: stop``); the message is its one line, the
    same on every rank."""


def value_words(value: float) -> str:
    """``NaN``, ``inf`` or ``-inf``."""
    return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def first_nonfinite(values: Sequence[float]) -> tuple[int, float] | None:
    """The first rank whose value is NaN or infinite, and that value; ``None`` when all are finite."""
    return next(((rank, v) for rank, v in enumerate(values) if not math.isfinite(v)), None)


def stop_line(what: str, step: int, rank: int, value: float, saved_step: int | None, late_by: int = 0) -> str:
    """The line a stopped run ends with (every rank prints it; the launcher's triage finds it)."""
    seen = (f" (first seen here: losses are read every {late_by + 1} steps, logging.every_steps)"
            if late_by else "")
    safe = (f"the last checkpoint before it is step {saved_step}" if saved_step is not None
            else "no checkpoint was saved before it")
    return (f"{what} is {value_words(value)} at step {step} on rank {rank}{seen}: training stopped "
            f"(training.on_nan: stop); {safe}")


class NanGuard:
    """What ``training.on_nan`` does, for one run: checks at logged steps, before saves, and (with
    ``skip_step``) before each update."""

    def __init__(self, mode: str, d: Dist, log: MetricsLogger, ckpt: Saves, every_steps: int) -> None:
        self.mode, self.d, self.log, self.ckpt, self.every_steps = mode, d, log, ckpt, every_steps
        self.said = False
        """``continue``: the first non-finite loss was said."""
        self.skipped_in_a_row = 0

    def logged(self, step: int, rank_losses: Sequence[float]) -> None:
        """A logged step's losses, one per rank (already gathered on every rank)."""
        bad = first_nonfinite(rank_losses)
        if bad is None or self.mode == "skip_step":  # a skipped step's own loss was said before its update
            return
        rank, value = bad
        if self.mode == "stop":
            self._stop(stop_line("loss", step, rank, value, self.ckpt.saved_step, self._late_by(step)), step,
                       rank, value)
        if not self.said:
            self.said = True
            self._say(f"loss is {value_words(value)} at step {step} on rank {rank}: training goes on "
                      "(training.on_nan: continue); every later loss and checkpoint follows from it",
                      step, rank, value, "continued")

    def before_save(self, net: nn.Module, step: int, loss_sum: torch.Tensor | None) -> None:
        """A checkpoint of ``step`` is about to be saved: stop instead when this step's loss (``loss_sum``,
        this rank's; ``None``: not known here) or the weights are not finite on some rank."""
        if self.mode == "continue":
            return
        # A skipped step's loss is not in the weights: with skip_step only the weights count.
        loss = float(loss_sum) if loss_sum is not None and self.mode == "stop" else 0.0
        mine = torch.tensor([loss, _max_abs(net)], dtype=torch.float64)
        rows = [torch.empty_like(mine) for _ in range(self.d.world)]
        dist.all_gather(rows, mine)
        table = torch.stack(rows)
        for column, what in ((0, "loss"), (1, "the largest weight")):
            bad = first_nonfinite(table[:, column].tolist())
            if bad is not None:
                rank, value = bad
                self._stop(stop_line(what, step, rank, value, self.ckpt.saved_step), step, rank, value)

    def skip_check(self, step: int) -> Callable[[torch.Tensor, torch.Tensor | None], bool] | None:
        """``skip_step``: the test ``train_step`` asks before step ``step``'s update (``None`` otherwise)."""
        if self.mode != "skip_step":
            return None

        def skip(loss_sum: torch.Tensor, grad_norm: torch.Tensor | None) -> bool:
            norm = float(grad_norm) if grad_norm is not None else 0.0
            mine = torch.tensor([float(loss_sum), norm], dtype=torch.float64)
            rows = [torch.empty_like(mine) for _ in range(self.d.world)]
            dist.all_gather(rows, mine)
            table = torch.stack(rows)
            bad = first_nonfinite(table[:, 0].tolist())
            what = "loss"
            if bad is None:
                bad, what = first_nonfinite(table[:, 1].tolist()), "the gradients' norm"
            if bad is None:
                self.skipped_in_a_row = 0
                return False
            rank, value = bad
            self.skipped_in_a_row += 1
            if self.skipped_in_a_row >= SKIP_LIMIT:
                self._stop(f"{what} is {value_words(value)} at step {step} on rank {rank}: training stopped "
                           f"after {SKIP_LIMIT} steps skipped in a row (training.on_nan: skip_step); "
                           + (f"the last checkpoint before it is step {self.ckpt.saved_step}"
                              if self.ckpt.saved_step is not None else "no checkpoint was saved before it"),
                           step, rank, value)
            self._say(f"{what} is {value_words(value)} at step {step} on rank {rank}: the step's update was "
                      "skipped (training.on_nan: skip_step)", step, rank, value, "skipped")
            return True

        return skip

    def _late_by(self, step: int) -> int:
        """How many steps before ``step`` the loss was not read (a NaN may have started there)."""
        return min(self.every_steps - 1, step - 1) if self.every_steps > 1 else 0

    def _say(self, line: str, step: int, rank: int, value: float, action: str) -> None:
        if self.d.is_main:
            self.log.reporter.write(MetricRecord(step=step, kind=KIND_NONFINITE, max_steps=self.log.max_steps,
                                                 extra={"rank": rank, "value": value_words(value), "action": action}))
            print(line, flush=True)

    def _stop(self, line: str, step: int, rank: int, value: float) -> None:
        if self.d.is_main:
            self.log.reporter.write(MetricRecord(step=step, kind=KIND_NONFINITE, max_steps=self.log.max_steps,
                                                 extra={"rank": rank, "value": value_words(value), "action": "stopped"}))
        raise NonFiniteLoss(line)


def _max_abs(net: nn.Module) -> float:
    """The largest magnitude among this rank's trainable weights (its shards): NaN or inf when any is."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in net.parameters() if p.requires_grad]
    local = [t.detach() for t in local if t.numel()]
    if not local:
        return 0.0
    norms = torch._foreach_norm(local, math.inf)
    return float(torch.stack([n.float() for n in norms]).max())
