"""Whether a resumed run continues what its checkpoint says it stopped at.

A save records the facts a resume must continue (``meta.json``'s ``resume``: :class:`ResumeFacts`); at
the first step after a resume the trainer gathers the same facts again and :func:`compare` judges them.
Stdlib only and pure, so the rule is tested table-driven without torch; the trainer gathers the facts
(:mod:`trainer.ckpt.resume_facts`) and the verdict travels as a :class:`trainer.wire.protocol.ResumeCheck`.

The loss rule: the first loss after the resume is compared with the last loss recorded before the stop.
A bit-exact resume gives the loss the uninterrupted run would have had, so its change from the last
recorded loss is one more step-to-step change of the same run; the recorded losses say how large those
are (their root mean square, which covers both the noise and the trend of a falling loss). A change
past ``LOSS_NOISE_FACTOR`` times that, and past ``LOSS_FLOOR`` nats, is flagged.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from itertools import pairwise
from typing import Any

from trainer.wire.protocol import ResumeCheck

LOSSES_KEPT = 20
"""How many of the last logged losses a checkpoint records."""
LOSSES_NEEDED = 3
"""Fewer recorded losses than this (two step-to-step changes) say nothing of the run's noise."""
LOSS_NOISE_FACTOR = 3.0
LOSS_FLOOR = 0.1
"""Nats: a converged run's changes can be tiny; a change this small is never called a jump."""
LR_REL_TOL = 1e-6


@dataclass(frozen=True)
class ResumeFacts:
    """What a save records and a resume gathers again (``None``: not known, e.g. an older checkpoint)."""

    run_id: str | None = None
    step: int | None = None
    total_steps: int | None = None
    """The run's length in steps: the learning-rate schedule's."""
    epoch_counted: bool | None = None
    """The length comes from ``num_epochs`` (no ``max_steps``): on another world size the step is rescaled."""
    epoch: int | None = None
    samples_in_epoch: int | None = None
    """Rows of the epoch's global order already trained on (the data position, independent of world size)."""
    batch_rows: int | None = None
    """Rows one optimiser step takes over all ranks (ranks x per-device batch x accumulation)."""
    next_batch: str | None = None
    """A short hash of the token ids of the rows the next step trains on, in the global order."""
    world_size: int | None = None
    sharding: str | None = None
    lr: float | None = None
    """The learning rate the next step uses."""
    losses: tuple[float, ...] = ()
    """The last logged losses, oldest first."""
    seed: int | None = None
    data: str | None = None
    """A fingerprint of the training rows (their count and the first rows' token ids)."""
    dataset: str | None = None
    source_rows: tuple[int, ...] = ()
    """A mixture's rows taken from each source up to the save (empty: one source)."""
    digests: bool | None = None
    """The checkpoint lists the SHA-256 of its files (``meta.json``'s shards): a resume reads it only once
    its bytes match them, so the check names them. Read from the shard list, never recorded as a fact."""

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if v not in (None, ())}

    @classmethod
    def from_meta(cls, meta: Any) -> ResumeFacts:
        """The facts a checkpoint's ``meta.json`` records; a field missing or of the wrong type (an older
        trainer, a hand-edited file) is unknown, never an error."""
        meta = meta if isinstance(meta, dict) else {}
        saved = meta.get("resume") if isinstance(meta.get("resume"), dict) else {}
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "digests":
                shards = meta.get("shards")
                values[f.name] = (all(isinstance(e, dict) and isinstance(e.get("sha256"), str) for e in shards.values())
                                  if isinstance(shards, dict) and shards else None)
                continue
            value = saved.get(f.name, meta.get(f.name) if f.name in ("run_id", "world_size") else None)
            kind = f.type
            if f.name == "losses":
                good = isinstance(value, list) and all(_number(x) for x in value)
                values[f.name] = tuple(float(x) for x in value) if good else ()
            elif f.name == "source_rows":
                good = isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                       for x in value)
                values[f.name] = tuple(value) if good else ()
            elif "bool" in kind:
                values[f.name] = value if isinstance(value, bool) else None
            elif "int" in kind:
                values[f.name] = value if isinstance(value, int) and not isinstance(value, bool) else None
            elif "float" in kind:
                values[f.name] = float(value) if _number(value) else None
            else:
                values[f.name] = value if isinstance(value, str) and value else None
        return cls(**values)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def loss_jump(first: float, losses: tuple[float, ...]) -> str | None:
    """Words for a first loss that jumps past the run's own step-to-step noise; ``None``: it does not."""
    changes = [b - a for a, b in pairwise(losses)]
    noise = math.sqrt(sum(c * c for c in changes) / len(changes))
    limit = max(LOSS_NOISE_FACTOR * noise, LOSS_FLOOR)
    jump = abs(first - losses[-1])
    if jump <= limit:
        return None
    return (f"loss: {first:.4g} at the first step, {losses[-1]:.4g} before the stop (a change of {jump:.3g}; "
            f"the run's own step-to-step changes are {noise:.3g} rms, flagged past {limit:.3g})")


def compare(saved: ResumeFacts, now: ResumeFacts, first_loss: float | None,
            continues: tuple[str, ...] = ()) -> ResumeCheck:
    """The verdict on a resume: ``differs`` when anything recorded is not what the run continues with,
    else ``resharded`` when the world size or sharding changed, else ``verified``; ``unchecked`` when the
    checkpoint recorded nothing to compare (an older trainer's).

    ``continues``: the runs this resume claims to continue (``fsdp-tui resume RUN`` names RUN and the runs
    it continued; a retry adds itself). A checkpoint written by any other run differs. Without a claim
    (a relaunch of the same workload into a shared ``output_dir`` takes the newest one on purpose) the
    verdict names that run, and a wrong one shows in what it recorded (other data, seed, step, learning
    rate or loss)."""
    differs: list[str] = []
    checked: list[str] = []
    unchecked: list[str] = []

    def check(name: str, known: bool, problem: str | None) -> None:
        if not known:
            unchecked.append(name)
        elif problem:
            differs.append(problem)
        else:
            checked.append(name)

    longer = None not in (saved.total_steps, now.total_steps) and saved.total_steps != now.total_steps
    rescaled = longer and bool(now.epoch_counted)
    step_known = saved.step is not None and now.step is not None
    if step_known:
        # Another world size without max_steps: the same share of the run done, on the new count of steps.
        expected = saved.step * now.total_steps // saved.total_steps if rescaled else saved.step
        stretched = f" ({expected} of {now.total_steps} on this world size)" if rescaled else ""
        check("step", True, now.step != expected
              and f"step: the checkpoint is step {saved.step}{stretched}, the run continues at step {now.step}")
    else:
        check("step", False, None)
    check("seed", None not in (saved.seed, now.seed),
          saved.seed != now.seed and f"seed: {saved.seed} in the checkpoint, {now.seed} now")
    same_name = saved.dataset == now.dataset
    check("data", None not in (saved.data, now.data), saved.data != now.data and (
        f"data: not the rows the checkpoint trained on ({saved.dataset or '?'} then, {now.dataset or '?'} now)"
        if not same_name else f"data: not the rows the checkpoint trained on (the same dataset {now.dataset}, "
                              "other rows: its content, the tokenizer, max_seq_len or the held-out split changed)"))
    same_rows = saved.batch_rows is not None and saved.batch_rows == now.batch_rows
    if same_rows or None in (saved.batch_rows, now.batch_rows):
        check("next batch", None not in (saved.next_batch, now.next_batch),
              saved.next_batch != now.next_batch and "next batch: not the rows the stopped run would have trained "
                                                     "on next (another data order)")
    position_known = None not in (saved.epoch, saved.samples_in_epoch, now.epoch, now.samples_in_epoch)
    if position_known:
        gap = saved.samples_in_epoch - now.samples_in_epoch
        # Another step size: the position is rounded down to a whole step of the new size.
        slack = now.batch_rows if not same_rows and now.batch_rows else 1
        moved = saved.epoch != now.epoch or not 0 <= gap < slack
    check("data position", position_known, position_known and moved
          and f"data position: epoch {saved.epoch} sample {saved.samples_in_epoch} in the checkpoint, "
              f"epoch {now.epoch} sample {now.samples_in_epoch} now")
    if saved.source_rows or now.source_rows:
        known = bool(saved.source_rows) and bool(now.source_rows)
        if known and len(saved.source_rows) != len(now.source_rows):
            off = True
        elif known:
            # Another step size: the position is rounded down to a whole step of the new size.
            apart = sum(abs(a - b) for a, b in zip(saved.source_rows, now.source_rows, strict=True))
            off = apart != 0 if same_rows else apart >= (now.batch_rows or 1)
        check("rows from each source", known, known and off
              and f"rows from each source: {', '.join(map(str, saved.source_rows))} in the checkpoint, "
                  f"{', '.join(map(str, now.source_rows))} now")
    if longer:
        unchecked.append(f"learning rate (the schedule is {now.total_steps} steps now, {saved.total_steps} then)")
    else:
        check("learning rate", None not in (saved.lr, now.lr),
              saved.lr is not None and now.lr is not None and not math.isclose(saved.lr, now.lr, rel_tol=LR_REL_TOL)
              and f"learning rate: {saved.lr:.6g} recorded for the next step, {now.lr:.6g} now")
    enough = len(saved.losses) >= LOSSES_NEEDED and first_loss is not None and math.isfinite(first_loss)
    check("loss", enough, enough and loss_jump(first_loss, saved.losses))
    if saved.digests is not None:  # the load refuses bytes that differ: listed, they matched
        check("shard digests", saved.digests, None)
    if continues:
        check("checkpoint's run", saved.run_id is not None, saved.run_id not in continues
              and f"checkpoint's run: written by run {saved.run_id}, not by the run this resume continues "
                  f"({', '.join(continues)})")
    resharded = (None not in (saved.world_size, now.world_size) and saved.world_size != now.world_size) or (
        None not in (saved.sharding, now.sharding) and saved.sharding != now.sharding)
    if differs:
        verdict = "differs"
    elif not checked:
        verdict = "unchecked"
    else:
        verdict = "resharded" if resharded else "verified"
    return ResumeCheck(verdict=verdict, step=now.step or 0, from_step=saved.step, from_run=saved.run_id,
                       world_before=saved.world_size, world_after=now.world_size, sharding_before=saved.sharding,
                       sharding_after=now.sharding, differs=tuple(differs), checked=tuple(checked),
                       not_checked=tuple(unchecked))
