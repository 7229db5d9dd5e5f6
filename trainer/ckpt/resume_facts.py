"""The facts a resume must continue, gathered from the running trainer: at each save (recorded in the
checkpoint's ``meta.json``) and again after a resume, judged at its first step
(:func:`trainer.ckpt.resume_check.compare`). Rank 0 gathers and judges; every rank takes part in the one
collective (the first step's loss, when that step is not logged anyway)."""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Any

from trainer.ckpt.resume_check import LOSSES_KEPT, ResumeFacts, compare
from trainer.data.rows import GlobalOrder
from trainer.loop.state import TrainState
from trainer.wire.protocol import ResumeCheck

FINGERPRINT_ROWS = 16
"""The first training rows whose token ids the data fingerprint hashes (with the count of rows)."""


def rows_hash(rows: list[dict[str, Any]], indices: list[int], count: int | None = None) -> str:
    """A short hash of the token ids of ``rows[i]`` for ``indices`` (and of ``count``, when given)."""
    h = hashlib.sha256(b"" if count is None else f"{count};".encode())
    for i in indices:
        ids = rows[i]["input_ids"]
        h.update(len(ids).to_bytes(8, "little"))
        h.update(ids.numpy().astype("<i8").tobytes())
    return h.hexdigest()[:16]


def _fingerprint(rows) -> str:
    """The training rows' count and first rows' token ids; a stream's own (its sources and how they are
    tokenized: its first rows are long gone after a resume)."""
    own = getattr(rows, "fingerprint", None)
    if own is not None:
        return own()
    return rows_hash(rows, list(range(min(FINGERPRINT_ROWS, len(rows)))), len(rows))


def next_step_rows(order: GlobalOrder, epoch: int, position: int, accum: int) -> list[int]:
    """The rows (of every rank) the next optimiser step trains on, rolling into the next epoch as
    :func:`trainer.loop.train.micro_batches` does."""
    out: list[int] = []
    for _ in range(accum):
        if position >= order.batches_per_epoch:
            epoch, position = epoch + 1, 0
        out += order.global_indices(epoch, position)
        position += 1
    return out


class ResumeWatch:
    """Keeps the last logged losses, says what a save records for a later resume, and judges a resume
    once, at its first step."""

    def __init__(self, *, order: GlobalOrder, rows: list[dict[str, Any]], accum: int, seed: int, sharding: str,
                 dataset: str, run_id: str | None, epoch_counted: bool, is_main: bool, scheduler,
                 continues: tuple[str, ...] = ()) -> None:
        self.order, self.rows, self.accum, self.scheduler, self.is_main = order, rows, accum, scheduler, is_main
        self.continues = (*continues, run_id) if continues and run_id else tuple(continues)
        """The runs whose checkpoints this resume may load (``checkpoint.resume_runs`` and, for its retries,
        this run): empty when it claims none."""
        self.losses: deque[float] = deque(maxlen=LOSSES_KEPT)
        self.fixed = {"seed": seed, "sharding": sharding, "dataset": dataset, "run_id": run_id,
                      "epoch_counted": epoch_counted,
                      "world_size": order.world, "batch_rows": order.per_global * accum,
                      "data": _fingerprint(rows) if is_main else None}
        self.pending: tuple[ResumeFacts, ResumeFacts] | None = None
        """(recorded, now) until the first step after a resume is judged."""
        self.judging = False
        """A resume waits for its first step's judgement (the same on every rank: all join its collective)."""

    def logged(self, loss: float) -> None:
        self.losses.append(loss)

    def facts(self, state: TrainState) -> ResumeFacts:
        """The facts as of now: ``state`` is the trainer's position."""
        epoch, position = state.data.epoch, state.data.position
        rows = next_step_rows(self.order, epoch, position, self.accum)
        sources = self.order.source_counts(epoch, position)
        return ResumeFacts(step=state.step, total_steps=state.total_steps, epoch=epoch,
                           samples_in_epoch=self.order.rows_done(epoch, position), next_batch=rows_hash(self.rows, rows),
                           lr=float(self.scheduler.get_last_lr()[0]), losses=tuple(self.losses),
                           source_rows=tuple(sources) if sources is not None else (), **self.fixed)

    def record(self, state: TrainState) -> dict[str, Any] | None:
        """What a save of ``state`` records in ``meta.json`` (rank 0; ``None`` elsewhere)."""
        return self.facts(state).to_dict() if self.is_main else None

    def resumed(self, meta: dict | None, state: TrainState) -> None:
        """The run resumed from a checkpoint whose ``meta.json`` is ``meta`` (read on rank 0) and now stands
        at ``state``: its first step will be judged."""
        self.judging = True
        if self.is_main:
            saved = ResumeFacts.from_meta(meta)
            self.losses.extend(saved.losses)  # a save soon after this resume still knows the run's noise
            self.pending = (saved, self.facts(state))

    def first_step(self, result, logged_loss: float | None) -> ResumeCheck | None:
        """After each step: the judgement of a resume at its first step (rank 0), once. Collective on that
        step when it is not logged (its loss is gathered here)."""
        if not self.judging:
            return None
        self.judging = False
        loss = logged_loss if logged_loss is not None else result.mean_loss()
        if self.pending is None:
            return None
        saved, now = self.pending
        self.pending = None
        return compare(saved, now, loss, self.continues)
