"""Every node of a run as one row, and the odd node pointed out. Pure: a :class:`RunView` and a time in,
rows out; the monitor's overview, ``fsdp-tui show RUN --nodes`` and the run's triage all read these.

At 64 nodes the question is "which node?". A node is *odd* when one of its figures stands far from the
median of the other nodes that are running (never against a fixed number alone: a run that prints little
or sits idle is even as long as every node does the same). Small absolute floors keep noise on a quiet run
from marking anything. The thresholds below are the ones the docs (docs/app.md) state.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass

from launcher.events import NodeState
from launcher.runs.read.view import NodeView, RunView
from launcher.words import node_at

MIN_OTHERS = 3
"""Figures are compared once at least this many other nodes run (4 nodes in all): the median of one or
two others is one node's figure, and rank 0's node often prints far more than the rest."""
QUIET_MIN_S = 30.0
QUIET_FACTOR = 10.0
"""Quiet: no output for at least ``QUIET_MIN_S`` and ``QUIET_FACTOR`` times the others' median."""
RATE_LOW_FRACTION = 0.2
RATE_FLOOR_PER_S = 1.0
"""Slow output: lines/s at most ``RATE_LOW_FRACTION`` of the others' median, while they print at least
``RATE_FLOOR_PER_S``."""
CPU_WORK_PCT = 5.0
CPU_BUSY_PCT = 50.0
IDLE_FRACTION = 0.25
BUSY_FACTOR = 4.0
"""CPU idle while the others work: at most ``IDLE_FRACTION`` of their median, which is at least
``CPU_WORK_PCT`` (percent of one core; many test nodes share two cores). Busy while they wait: at least
``CPU_BUSY_PCT`` and ``BUSY_FACTOR`` times their median."""
GPU_WORK_PCT = 30.0
"""GPU idle while the others work: utilisation at most ``IDLE_FRACTION`` of their median, which is at
least ``GPU_WORK_PCT``; busy while they wait: at least ``GPU_WORK_PCT`` and ``BUSY_FACTOR`` times it."""
MEMORY_FACTOR = 1.5
MEMORY_FLOOR_MIB = 1024.0
"""Memory far above: RSS (or GPU memory) at least ``MEMORY_FACTOR`` times the others' median and
``MEMORY_FLOOR_MIB`` more than it."""
FIRST_FAIL_LEAD_S = 1.0
"""First to fail: failed (non-zero exit, or lost) this much before any other node did."""

THRESHOLDS = {
    "min_other_nodes": MIN_OTHERS, "quiet_min_s": QUIET_MIN_S, "quiet_factor": QUIET_FACTOR,
    "rate_low_fraction": RATE_LOW_FRACTION, "rate_floor_per_s": RATE_FLOOR_PER_S,
    "cpu_work_pct": CPU_WORK_PCT, "cpu_busy_pct": CPU_BUSY_PCT, "gpu_work_pct": GPU_WORK_PCT,
    "idle_fraction": IDLE_FRACTION, "busy_factor": BUSY_FACTOR, "memory_factor": MEMORY_FACTOR,
    "memory_floor_mib": MEMORY_FLOOR_MIB, "first_fail_lead_s": FIRST_FAIL_LEAD_S,
}
"""What ``show --nodes --json`` prints beside the rows, so a reader knows what a mark means."""


@dataclass(frozen=True)
class OddMark:
    """One figure of a node far from the others: ``figure`` against the others' ``median``."""

    what: str
    """quiet, slow_output, cpu_idle, cpu_busy, memory, gpu_idle, gpu_busy, gpu_memory, first_failed."""
    figure: float
    median: float
    says: str
    """The mark in words: ``no output for 40 s (others: 1 s)``."""


@dataclass(frozen=True)
class NodeRow:
    node: int
    host: str
    state: str
    exit_code: int | None
    lines: int
    lines_per_s: float
    last_output_age_s: float | None
    """Seconds since the node's last line (``None``: it printed nothing yet)."""
    cpu_pct: float | None
    rss_mib: float | None
    gpu_util_pct: float | None
    """The node's GPUs' mean utilisation (``None``: no ``nvidia-smi`` samples)."""
    gpu_mem_used_gib: float | None
    step: int | None
    """The last training step, on rank 0's node (the only one that reports metrics)."""
    step_s: float | None = None
    """The node's slowest rank's own work in the newest step (built-in trainer; ``docs/ranks.md``)."""
    odd: tuple[OddMark, ...] = ()
    swapped_in: str = ""
    """A node that took a failed node's place: which, and why (``replaced gpu-07 (lost at step 1,840)``)."""

    def to_dict(self) -> dict:
        return asdict(self)

    def odd_words(self) -> str:
        """``node 3 (host-3): no output for 40 s (others: 1 s)`` (empty when the node is even)."""
        if not self.odd:
            return ""
        return f"{node_at(self.node, self.host)}: " + "; ".join(m.says for m in self.odd)


def node_rows(view: RunView, now: float) -> list[NodeRow]:
    """One row per node the view knows, by node rank, each with its odd marks."""
    plain = [_row(n, view, now) for n in sorted(view.nodes.values(), key=lambda n: n.node_rank)]
    marks = odd_marks(plain, view, now)
    return [NodeRow(**{**asdict(r), "odd": marks.get(r.node, ())}) if marks.get(r.node) else r for r in plain]


def odd_nodes(rows: list[NodeRow]) -> list[NodeRow]:
    return [r for r in rows if r.odd]


def _row(n: NodeView, view: RunView, now: float) -> NodeRow:
    gpus = n.gpus
    return NodeRow(
        node=n.node_rank, host=n.host, state=n.state.value, exit_code=n.exit_code, lines=n.lines,
        lines_per_s=round(n.lines_per_s(now), 2),
        last_output_age_s=None if n.last_output_at is None else round(max(0.0, now - n.last_output_at), 1),
        cpu_pct=None if n.usage is None else n.usage.cpu_pct,
        rss_mib=None if n.usage is None else n.usage.rss_mib,
        gpu_util_pct=round(sum(g.utilization_pct for g in gpus) / len(gpus), 1) if gpus else None,
        gpu_mem_used_gib=round(sum(g.memory_used_mib for g in gpus) / 1024, 2) if gpus else None,
        step=view.step if n.node_rank == 0 and view.first_step_at is not None else None,
        step_s=None if (t := view.node_step_s(n.node_rank)) is None else round(t, 4),
        swapped_in=n.swapped_in,
    )


def _silence(row: NodeRow, node: NodeView, now: float) -> float | None:
    """How long a running node has said nothing: since its last line, else since it began running."""
    if row.last_output_age_s is not None:
        return row.last_output_age_s
    return None if node.running_since is None else max(0.0, now - node.running_since)


Judge = Callable[[float, float], "tuple[str, str] | None"]
"""(figure, others' median) -> (what, words) when the node is odd on that figure, else ``None``."""


def _secs(s: float) -> str:
    return f"{s:.0f} s" if s < 600 else f"{s / 60:.0f} min"


def _quiet(age: float, median: float) -> tuple[str, str] | None:
    if age >= QUIET_MIN_S and age >= QUIET_FACTOR * median:
        return "quiet", f"no output for {_secs(age)} (others: {_secs(median)})"
    return None


def _slow(rate: float, median: float) -> tuple[str, str] | None:
    if median >= RATE_FLOOR_PER_S and rate <= RATE_LOW_FRACTION * median:
        return "slow_output", f"{rate:.1f} lines/s (others: {median:.1f})"
    return None


def _busy(kind: str, label: str, work_pct: float, busy_pct: float, busy_word: str = "") -> Judge:
    """Idle while the others work (they use at least ``work_pct``), or busy (at least ``busy_pct``) while
    they wait: the same rule for CPU and GPU, each with its own floors."""
    def judge(pct: float, median: float) -> tuple[str, str] | None:
        if median >= work_pct and pct <= IDLE_FRACTION * median:
            return f"{kind}_idle", f"{label} {pct:.0f}%{busy_word} while the others work (others: {median:.0f}%)"
        if pct >= busy_pct and pct >= BUSY_FACTOR * median:
            return f"{kind}_busy", f"{label} {pct:.0f}%{busy_word} while the others wait (others: {median:.0f}%)"
        return None
    return judge


_cpu = _busy("cpu", "CPU", CPU_WORK_PCT, CPU_BUSY_PCT)
_gpu = _busy("gpu", "GPU", GPU_WORK_PCT, GPU_WORK_PCT, " busy")


def _memory(label: str, what: str) -> Judge:
    def judge(mib: float, median: float) -> tuple[str, str] | None:
        if mib >= MEMORY_FACTOR * median and mib - median >= MEMORY_FLOOR_MIB:
            return what, f"{label} {mib / 1024:.1f} GiB (others: {median / 1024:.1f} GiB)"
        return None
    return judge


def odd_marks(rows: list[NodeRow], view: RunView, now: float) -> dict[int, tuple[OddMark, ...]]:
    """The marks of each odd node (node rank -> marks); nodes without marks are left out."""
    running = [r for r in rows if r.state == NodeState.RUNNING.value]
    figures: list[tuple[Callable[[NodeRow], float | None], Judge]] = [
        (lambda r: _silence(r, view.nodes[r.node], now), _quiet),
        (lambda r: r.lines_per_s, _slow),
        (lambda r: r.cpu_pct, _cpu),
        (lambda r: r.rss_mib, _memory("RSS", "memory")),
        (lambda r: r.gpu_util_pct, _gpu),
        (lambda r: None if r.gpu_mem_used_gib is None else r.gpu_mem_used_gib * 1024,
         _memory("GPU memory", "gpu_memory")),
    ]
    out: dict[int, list[OddMark]] = {}
    for figure_of, judge in figures:
        values = {r.node: v for r in running if (v := figure_of(r)) is not None}
        if len(values) <= MIN_OTHERS:
            continue
        for node, value in values.items():
            median = statistics.median(v for n, v in values.items() if n != node)
            found = judge(value, median)
            if found is None or (found[0] == "slow_output" and any(m.what == "quiet" for m in out.get(node, ()))):
                continue
            out.setdefault(node, []).append(OddMark(found[0], round(value, 2), round(median, 2), found[1]))
    first = _first_failed(view, now)
    if first is not None:
        out.setdefault(first[0], []).append(first[1])
    return {node: tuple(marks) for node, marks in out.items()}


def _failed(n: NodeView) -> bool:
    return n.ended_at is not None and (n.state == NodeState.LOST
                                       or (n.state == NodeState.EXITED and n.exit_code not in (0, None)))


def _first_failed(view: RunView, now: float) -> tuple[int, OddMark] | None:
    """The node that failed clearly before any other (a run of one node has no "first")."""
    if len(view.nodes) < 2:
        return None
    ends = sorted(((n.ended_at, n) for n in view.nodes.values() if n.ended_at is not None and _failed(n)),
                  key=lambda pair: pair[0])
    if not ends or (len(ends) > 1 and ends[1][0] - ends[0][0] < FIRST_FAIL_LEAD_S):
        return None
    first_end, first = ends[0]
    starts = [n.running_since for n in view.nodes.values() if n.running_since is not None]
    start = view.started_at or (min(starts) if starts else first_end)
    at = max(0.0, first_end - start)
    others = [max(0.0, (n.ended_at or now) - start) for n in view.nodes.values() if n is not first]
    median = statistics.median(others)
    ended = [n.ended_at for n in view.nodes.values() if n is not first and n.ended_at is not None]
    then = (f"the next node ended {_lead(min(ended) - first_end)} later" if ended
            else "the others still run")
    return first.node_rank, OddMark("first_failed", round(at, 1), round(median, 1),
                                    f"failed first, {_secs(at)} into the run; {then}")


def _lead(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else _secs(s)
