"""A hung run, noticed: every process alive, no step for many times the run's usual step time (the
classic NCCL hang that prints nothing). Pure: fed the moments new steps arrive, asked whether the run is stalled."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

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
