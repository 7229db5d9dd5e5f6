"""Which rank is slow: per-rank step times from rank 0's metrics, rolled over recent steps, and the ranks
that stand chronically above the median rank. Pure: fed metrics records, asked for a report.

Kept apart from the hang detector (:mod:`launcher.runs.owner.stall`): a slow rank still makes steps,
a hung run makes none. The figure is each rank's own part of a step (``MetricRecord.rank_step_s``):
in an FSDP step every rank waits for the slowest at each collective, so only the work a rank does alone
tells them apart.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from launcher.words import plural
from trainer.wire.protocol import MetricRecord

WINDOW_STEPS = 20
"""The flag looks at this many recent steps, and says nothing before a run has made them."""
THRESHOLD = 0.15
"""A rank is slow when its own work takes this much longer than the median rank's (+15%)..."""
CHRONIC = 0.75
"""...in at least this share of the window's records (one noisy step is not a slow rank)..."""
MIN_EXCESS_S = 0.001
"""...and by at least this many seconds a step (microseconds of timer noise are not a slow rank)."""
HISTORY = 240
"""Records kept for the table (a bounded history, whatever the run's length)."""


@dataclass(frozen=True)
class SlowRank:
    rank: int
    node: int | None
    excess: float
    """How much longer than the median rank, as a fraction (0.18: +18%), the window's median."""
    steps: int
    """Steps the window spans."""
    step_s: float
    median_s: float
    """Seconds a step, this rank and the median rank (the window's means)."""

    @property
    def says(self) -> str:
        where = f"rank {self.rank}" + (f" on node {self.node}" if self.node is not None else "")
        return (f"{where} +{self.excess:.0%} over {plural(self.steps, 'step')} "
                f"({_s(self.step_s)} a step of its own work, median rank {_s(self.median_s)})")

    def to_dict(self) -> dict:
        return {"rank": self.rank, "node": self.node, "excess": round(self.excess, 4), "steps": self.steps,
                "step_s": round(self.step_s, 6), "median_s": round(self.median_s, 6), "says": self.says}


@dataclass(frozen=True)
class RankRow:
    rank: int
    node: int | None
    last_s: float | None
    """The rank's latest figure (seconds a step of its own work)."""
    ratios: tuple[float | None, ...]
    """Its figure over the median rank's, record by record (oldest first), for a heatmap."""
    slow: bool


@dataclass(frozen=True)
class RankReport:
    steps: tuple[int, ...]
    """The step of each record in ``RankRow.ratios``."""
    rows: tuple[RankRow, ...]
    slow: tuple[SlowRank, ...]
    window_steps: int
    """Steps the flag has looked over (fewer than ``WINDOW_STEPS``: too early to say)."""

    @property
    def says(self) -> str:
        """One line: the slow ranks, or why none is named."""
        if not self.rows:
            return "no per-rank step times (the built-in trainer sends them; see docs/ranks.md for scripts)"
        if self.slow:
            return "; ".join(s.says for s in self.slow)
        if self.window_steps < WINDOW_STEPS:
            return f"no slow rank yet ({self.window_steps} of {plural(WINDOW_STEPS, 'step')} seen)"
        return f"no slow rank over the last {plural(self.window_steps, 'step')}"

    def node_step_s(self) -> dict[int, float]:
        """Each node's slowest rank's latest figure (a node overview's per-node column)."""
        out: dict[int, float] = {}
        for row in self.rows:
            if row.node is not None and row.last_s is not None:
                out[row.node] = max(out.get(row.node, 0.0), row.last_s)
        return out

    def to_dict(self) -> dict:
        return {"slow": [s.to_dict() for s in self.slow], "window_steps": self.window_steps,
                "thresholds": thresholds(), "says": self.says}


def thresholds() -> dict:
    return {"window_steps": WINDOW_STEPS, "slower_than_median": THRESHOLD, "in_share_of_records": CHRONIC,
            "min_excess_s": MIN_EXCESS_S}


@dataclass
class RankTimes:
    """Rolling per-rank step times of one run, fed record by record (the monitor keeps one)."""

    num_nodes: int | None = None
    """Nodes of the run: ranks per node = ranks // nodes names each rank's node."""
    records: deque = field(default_factory=lambda: deque(maxlen=HISTORY))

    def add(self, record: MetricRecord) -> bool:
        """Keep a train record that carries per-rank times; says whether it did."""
        if record.kind != "train" or not record.rank_step_s:
            return False
        if self.records and record.step <= self.records[-1].step:  # a restarted attempt starts afresh
            self.records.clear()
        self.records.append(record)
        return True

    def report(self, columns: int = 12) -> RankReport:
        usable = [r for r in self.records if _median(r.rank_step_s)]
        if not usable:
            return RankReport((), (), (), 0)
        world = len(usable[-1].rank_step_s)
        usable = [r for r in usable if len(r.rank_step_s) == world]
        per_node = world // self.num_nodes if self.num_nodes and world % self.num_nodes == 0 else None
        window, span = _window(usable)
        slow = tuple(s for rank in range(world)
                     if (s := _judge(rank, window, span, per_node)) is not None) if span >= WINDOW_STEPS else ()
        slow_ranks = {s.rank for s in slow}
        shown = usable[-columns:]
        rows = tuple(RankRow(rank, _node(rank, per_node), usable[-1].rank_step_s[rank],
                             tuple(_ratio(r, rank) for r in shown), rank in slow_ranks) for rank in range(world))
        return RankReport(tuple(r.step for r in shown), rows, tuple(sorted(slow, key=lambda s: -s.excess)), span)


def rank_report(records: Iterable[MetricRecord], num_nodes: int | None) -> RankReport:
    """The report over a run's whole metrics file (``show``, the triage)."""
    times = RankTimes(num_nodes)
    for record in records:
        times.add(record)
    return times.report()


def _window(records: list[MetricRecord]) -> tuple[list[MetricRecord], int]:
    """The records of the last ``WINDOW_STEPS`` steps, and how many steps they span."""
    last = records[-1].step
    window = [r for r in records if r.step > last - WINDOW_STEPS]
    before = records[-len(window) - 1].step if len(window) < len(records) else None
    gap = (window[1].step - window[0].step) if len(window) > 1 else 1
    first = before if before is not None else window[0].step - gap
    return window, last - first


def _judge(rank: int, window: list[MetricRecord], span: int, per_node: int | None) -> SlowRank | None:
    pairs = [(r.rank_step_s[rank], _median(r.rank_step_s)) for r in window]
    pairs = [(mine, median) for mine, median in pairs if mine is not None and median]
    if not pairs:
        return None
    ratios = [mine / median for mine, median in pairs]
    excess = statistics.median(ratios) - 1
    slow_share = sum(1 for x in ratios if x > 1 + THRESHOLD) / len(ratios)
    mine_s = statistics.fmean(m for m, _ in pairs)
    median_s = statistics.fmean(m for _, m in pairs)
    if excess < THRESHOLD or slow_share < CHRONIC or mine_s - median_s < MIN_EXCESS_S:
        return None
    return SlowRank(rank, _node(rank, per_node), excess, span, mine_s, median_s)


def _median(values: tuple[float | None, ...]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _ratio(record: MetricRecord, rank: int) -> float | None:
    mine, median = record.rank_step_s[rank], _median(record.rank_step_s)
    return mine / median if mine is not None and median else None


def _node(rank: int, per_node: int | None) -> int | None:
    return rank // per_node if per_node else None


def _s(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"
