"""A hung run, noticed: every process alive, no step for many times the run's usual step time (the
classic NCCL hang that prints nothing). :class:`StallWatch` is pure: fed the moments new steps arrive,
asked whether the run is stalled; :class:`StallVerdicts` is what the run policy composes to say it, take
every rank's stack once and end a stalled run's triage."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from launcher.backends.base import Backend
from launcher.events import RunState
from launcher.runs.core.collectives import stuck_collectives
from launcher.runs.core.triage import TriageReport, stalled_report
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.stack_dumps import take_stacks

MIN_STEPS = 3
"""Steps seen before a median means anything (the first ones include start-up and compilation)."""
WINDOW = 50


@dataclass
class StallWatch:
    factor: float
    """Stalled after this many times the median step time..."""
    min_s: float
    """...and never sooner than this."""
    arrivals: deque = field(default_factory=lambda: deque(maxlen=WINDOW + 1))
    last_step: int = -1

    def saw_step(self, step: int, at: float) -> None:
        if step > self.last_step:
            self.last_step = step
            self.arrivals.append(at)

    def median_step_s(self) -> float | None:
        times = list(self.arrivals)
        if len(times) < MIN_STEPS:
            return None
        return statistics.median(b - a for a, b in zip(times, times[1:], strict=False))

    def stalled_for(self, now: float) -> float | None:
        """Seconds since the last step, when that is past the limit; else ``None``."""
        median = self.median_step_s()
        if median is None:
            return None
        idle = now - self.arrivals[-1]
        return idle if idle > max(self.min_s, self.factor * median) else None

    def describe(self, now: float) -> str:
        idle, median = self.stalled_for(now) or 0.0, self.median_step_s() or 0.0
        return (f"stalled at step {self.last_step}: no step for {_dur(idle)} (its median step takes {_dur(median)}); "
                "every process may be waiting on one hung rank: press s in the monitor or run "
                "fsdp-tui stacks RUN for every rank's stack")


def _dur(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


class StallVerdicts:
    """Owns what the run says when its steps stop: the watch over the steps' arrivals, the words while
    it is stalled, the stack dumps (asked for, or taken once when a stall is noticed) and the triage of a
    run that ends stalled."""

    def __init__(self, rec: Recorder, factor: float, min_s: float) -> None:
        self.rec = rec
        self.watch = StallWatch(factor, min_s)
        self.stalled: str | None = None
        """What the stall watch said, while the run is stalled."""
        self.dump_due = False
        """A stall was just noticed: every rank's stack and collective is taken once."""

    def saw_progress(self, now: float, links_down: bool) -> None:
        """Say once when the run stops making steps, and once when it starts again. ``links_down``: a node
        is reconnecting, so steps not seen are not steps not made."""
        if self.rec.last_train_step is not None:
            self.watch.saw_step(self.rec.last_train_step, now)
        if links_down and self.stalled is None:
            return
        stalled = self.watch.stalled_for(now) is not None
        if stalled and self.stalled is None:
            self.stalled = self.watch.describe(now)
            self.rec.set_state(RunState.RUNNING, self.stalled)
            self.dump_due = True  # the watch loop takes every rank's stack and collective once
        elif not stalled and self.stalled is not None:
            self.stalled = None
            self.rec.set_state(RunState.RUNNING, f"steps advance again (step {self.watch.last_step})")

    async def dump_stacks(self, backend: Backend, ranks: list[int]) -> None:
        """Every rank's stack on the nodes of ``ranks``, kept with the run and announced; with torch's
        flight recorder dumps, the collective a stalled run waits in and who never entered it."""
        self.dump_due = False
        stuck = stuck_collectives(await take_stacks(backend, self.rec, ranks))
        if stuck and self.stalled is not None and "(flight recorder)" not in self.stalled:
            head, _, hint = self.stalled.partition("; every process may be waiting on one hung rank: ")
            self.stalled = f"{head}; {stuck[0].says}" + (f"; {hint}" if hint else "")
            self.rec.set_state(RunState.RUNNING, self.stalled)

    def triage(self) -> TriageReport:
        """The triage of a run that ended while stalled (no rank or line to point at), written."""
        report = stalled_report(self.stalled or "stalled")
        self.rec.write_triage(report)
        return report
