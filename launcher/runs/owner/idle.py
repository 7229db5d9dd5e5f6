"""Idle GPUs while a run runs: flagged after ``metrics.idle_policy.for_s``, stopped after ``stop_after_s``.

:class:`IdleWatch` is the pure policy over ``nvidia-smi`` samples (tested on recorded ones);
:class:`IdleGuard` is what the run's owner holds: it says the flag in the run's state detail (which the
monitor, ``runs`` and ``show`` display) and asks the owner to cancel when the policy says stop."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.events import GpuSample, RunState
from launcher.workload.idle import IdlePolicy

IDLE_PREFIX = "idle GPUs"
"""How an idle run's state detail begins (what the displays look for, as for ``stalled``)."""


class IdleWatch:
    """Per node: since when every one of its GPUs has been under the threshold (``None``: busy). Idle time
    is measured between samples, so a node that stops answering never counts as idle for longer."""

    def __init__(self, below_pct: float) -> None:
        self.below_pct = below_pct
        self.since: dict[int, float | None] = {}
        self.seen: dict[int, float] = {}
        self.peak: dict[int, float] = {}

    def saw(self, rank: int, samples: tuple[GpuSample, ...], now: float) -> None:
        if not samples:
            return
        busy = max(s.utilization_pct for s in samples)
        if busy >= self.below_pct:
            self.since[rank] = None
        elif self.since.get(rank) is None:
            self.since[rank] = now
        self.seen[rank], self.peak[rank] = now, busy

    def reset(self) -> None:
        """A new attempt: what the last one's GPUs did says nothing about this one's."""
        self.since.clear()
        self.seen.clear()

    def idle_for(self) -> float | None:
        """Seconds every reporting node's GPUs have all been idle; ``None`` when any is busy or none reports."""
        starts = {r: since for r, since in self.since.items() if since is not None}
        if not starts or len(starts) < len(self.since):
            return None
        return min(self.seen[r] - since for r, since in starts.items())

    def describe(self, seconds: float) -> str:
        nodes = ", ".join(f"node {r} at most {self.peak[r]:.0f}%" for r in sorted(self.seen))
        return f"{IDLE_PREFIX}: every GPU under {self.below_pct:g}% for {_minutes(seconds)} ({nodes})"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f} min"


@dataclass
class IdleVerdict:
    flag: str | None = None
    """A new flag to say (the state detail), once per idle spell."""
    stop: bool = False
    """The policy says stop the run now."""


class IdleGuard:
    """The owner's side: feed it samples (:meth:`saw`) and ask it each round (:meth:`check`)."""

    def __init__(self, policy: IdlePolicy) -> None:
        self.policy = policy
        self.watch = IdleWatch(policy.below_pct)
        self.flagged: str | None = None
        self.stopping = False

    def saw(self, rank: int, samples: tuple[GpuSample, ...], now: float) -> None:
        self.watch.saw(rank, samples, now)

    def check(self, state: RunState) -> IdleVerdict:
        if state != RunState.RUNNING:
            if state == RunState.RETRYING:
                self.watch.reset()
            return IdleVerdict()
        idle = self.watch.idle_for()
        if idle is None or idle < self.policy.for_s:
            if idle is None and self.flagged is not None and not self.stopping:
                self.flagged = None
                return IdleVerdict(flag="GPUs busy again")
            return IdleVerdict()
        verdict = IdleVerdict()
        if self.flagged is None:
            self.flagged = self.watch.describe(idle)
            verdict.flag = self.flagged
        stop_after = self.policy.stop_after_s
        if stop_after is not None and not self.stopping and idle >= self.policy.for_s + stop_after:
            self.stopping = True
            self.flagged = f"{self.watch.describe(idle)}: stopped by metrics.idle_policy"
            verdict.flag, verdict.stop = self.flagged, True
        return verdict
