"""What a run monitor shows, computed from run events: pure, bounded, tested without a terminal."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from launcher.events import (
    ATTEMPT_MARKER,
    GpuTelemetry,
    MetricsRecorded,
    NodeLines,
    NodeState,
    NodeStateChanged,
    NodeSwapped,
    NodeUsage,
    RunEvent,
    RunFinished,
    RunState,
    RunStateChanged,
)
from launcher.runs.core.resume_badge import ResumeBasis
from launcher.runs.core.swaps import Swap
from launcher.runs.core.triage import TriageReport, classify_line, might_signal
from trainer.wire.fit_record import KIND_FIT, FitSummary, MemoryCheck
from trainer.wire.protocol import (
    KIND_DATA,
    KIND_RESUME_CHECK,
    DataSummary,
    RankMemory,
    ResumeCheck,
    mix_rows,
    mix_words,
)

SERIES_LEN = 600
LINE_RATE_WINDOW_S = 30
"""A node's lines/s counts its output over this many latest seconds (one counter a second: bounded)."""


class LineRate:
    """Lines per second over the last :data:`LINE_RATE_WINDOW_S` seconds, in one small counter per
    second: a node streaming 5,000 lines/s for a day costs the same 30 counters as an idle one."""

    __slots__ = ("buckets",)

    def __init__(self) -> None:
        self.buckets: deque[list[int]] = deque(maxlen=LINE_RATE_WINDOW_S)
        """``[second, lines]`` pairs, oldest first."""

    def add(self, at: float, lines: int) -> None:
        second = int(at)
        if self.buckets and self.buckets[-1][0] >= second:
            self.buckets[-1][1] += lines  # a clock that steps back counts into the newest second
        else:
            self.buckets.append([second, lines])

    def spread(self, start: float, end: float, lines: int) -> None:
        """``lines`` written evenly from ``start`` to ``end`` (a record keeps no time per line: the
        average is the best its readers can say)."""
        if lines <= 0:
            return
        span = max(end - start, 1.0)
        first = max(start, end - LINE_RATE_WINDOW_S)
        second = int(first)
        while second <= int(end):
            self.add(second, round(lines * min(1.0, (min(second + 1, end) - max(second, first)) / span)))
            second += 1

    def per_s(self, now: float, since: float | None = None) -> float:
        """The rate over the window ending at ``now``; over the time since ``since`` when that is shorter
        (a node that began 5 s ago is not diluted by 25 s it did not exist)."""
        start = now - LINE_RATE_WINDOW_S
        total = sum(n for second, n in self.buckets if second + 1 > start and second <= now)
        span = LINE_RATE_WINDOW_S if since is None else min(LINE_RATE_WINDOW_S, now - since)
        return total / max(span, 1.0)


@dataclass
class NodeView:
    node_rank: int
    host: str = ""
    state: NodeState = NodeState.PENDING
    exit_code: int | None = None
    lines: int = 0
    first_error: tuple[int, str] | None = None
    """(line number in this node's log, the line) of the first failure signature of the last attempt."""
    attempt_starts_at: int = 0
    """The line number where the node's last attempt began (its attempt marker)."""
    gpus: tuple = ()
    """The latest ``GpuSample`` of each GPU on the node (``nvidia-smi``); empty on CPU-only nodes."""
    usage: NodeUsage | None = None
    """The latest CPU/RSS sample of the node's job processes (what CPU-only nodes show)."""
    running_since: float | None = None
    """When the node was first seen running (its silence and line rate count from there)."""
    ended_at: float | None = None
    """When the node stopped (exited, lost, stopped): which node failed first."""
    last_output_at: float | None = None
    rate: LineRate = field(default_factory=LineRate)
    swapped_in: str = ""
    """For a node swapped into a failed node's place: which host it replaced and why (``replaced gpu-07
    (lost at step 1,840)``); empty for the run's own nodes."""

    def lines_per_s(self, now: float) -> float:
        return self.rate.per_s(now, self.running_since)

    @property
    def gpu_summary(self) -> str:
        """``4 GPU 93% util, 61.2/80.0 GiB`` (averages and totals), or "" without telemetry."""
        if not self.gpus:
            return ""
        util = sum(g.utilization_pct for g in self.gpus) / len(self.gpus)
        used = sum(g.memory_used_mib for g in self.gpus) / 1024
        total = sum(g.memory_total_mib for g in self.gpus) / 1024
        return f"{len(self.gpus)} GPU {util:.0f}% util, {used:.1f}/{total:.1f} GiB"


ETA_GAP_STEPS = 5
ETA_GAP_MIN_S = 30.0
"""No step for this many step times (and at least this long): the ETA is not shown (a hung node)."""


@dataclass
class RunView:
    run_id: str
    state: RunState = RunState.PENDING
    attempt: int = 1
    detail: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    step: int = 0
    max_steps: int | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    router_aux_loss: float | None = None
    """A mixture-of-experts model's router load-balancing loss in the newest step that reported it."""
    loss: deque = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    eval_loss: deque = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    lr: deque = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    throughput: deque = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    memory: dict[int, RankMemory] = field(default_factory=dict)
    nodes: dict[int, NodeView] = field(default_factory=dict)
    triage: TriageReport | None = None
    """Why the run ended as it did, once its end came (``RunFinished``)."""
    first_step_at: tuple[float, int] | None = None
    """(when, step) of the first train step seen: the record's own time where it has one."""
    last_step_at: tuple[float, int] | None = None
    """(when, step) of the newest train step."""
    rank_step_s: tuple = ()
    """Every rank's own work in the newest step that reported it (seconds, by global rank; built-in trainer)."""
    resume_check: ResumeCheck | None = None
    """The newest resume's check (the built-in trainer's, at the first step after a resume)."""
    fit: FitSummary | None = None
    """Each rank's predicted peak memory (the built-in trainer's, said before its first step)."""
    data: DataSummary | None = None
    """What the run trains on (the built-in trainer's ``data`` record): a mixture's sources and shares."""
    mix_rows: tuple[int, ...] = ()
    """A mixture's rows taken from each source, as of the newest step that said."""
    continues: str = ""
    """The run whose checkpoint this one continues, in words (``continues run X from step N``), as its
    launch recorded it; said when nothing weighs more."""
    swaps: list[Swap] = field(default_factory=list)
    """The failed nodes the run's owner replaced, oldest first (each as its newest event said it)."""
    resume_basis: ResumeBasis | None = None
    """What of the run's plan as recorded decides whether it may have resumed, when known: a resume check
    from a run the launcher knows did not resume is no badge (:mod:`launcher.runs.core.resume_badge`)."""

    def apply(self, event: RunEvent, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if isinstance(event, RunStateChanged):
            self.state, self.attempt, self.detail = event.state, event.attempt, event.detail
            if event.state == RunState.RUNNING and self.started_at is None:
                self.started_at = now
        elif isinstance(event, NodeStateChanged):
            node = self.node(event.node_rank)
            node.host, node.state, node.exit_code = event.host, event.state, event.exit_code
            if event.state == NodeState.RUNNING:
                node.running_since = node.running_since or now
                node.ended_at = None
            elif event.state in (NodeState.EXITED, NodeState.LOST, NodeState.STOPPED) and node.ended_at is None:
                node.ended_at = now
        elif isinstance(event, NodeLines):
            node = self.node(event.node_rank)
            text = "\n".join(event.lines)
            if ATTEMPT_MARKER in text:
                for i, line in enumerate(event.lines):
                    if line.startswith(ATTEMPT_MARKER):  # a new attempt: its errors are the ones that count
                        node.first_error = None
                        node.attempt_starts_at = node.lines + i
            stopping = self.state in (RunState.CANCELLING, RunState.CANCELLED)  # what a stop makes jobs print
            if node.first_error is None and not stopping and might_signal(text):
                start = max(0, node.attempt_starts_at - node.lines)
                for i, line in enumerate(event.lines[start:], start=start):
                    if classify_line(line) is not None:
                        node.first_error = (node.lines + i, line)
                        break
            node.lines += len(event.lines)
            node.last_output_at = now
            node.rate.add(now, len(event.lines))
        elif isinstance(event, MetricsRecorded):
            self._metrics(event, now)
        elif isinstance(event, GpuTelemetry):
            self.node(event.node_rank).gpus = event.gpus
        elif isinstance(event, NodeUsage):
            self.node(event.node_rank).usage = event
        elif isinstance(event, NodeSwapped):
            self._swapped(event.swap)
        elif isinstance(event, RunFinished):
            self.state, self.triage, self.ended_at = event.state, event.triage, now

    def _swapped(self, swap: Swap) -> None:
        """A swap decided or settled: the node list follows the run's new nodes (fewer after a shrink)."""
        self.swaps = [s for s in self.swaps if s.number != swap.number] + [swap]
        self.swaps.sort(key=lambda s: s.number)
        if not swap.hosts_after:
            return
        for rank in [r for r in self.nodes if r >= len(swap.hosts_after)]:
            del self.nodes[rank]
        for rank, host in enumerate(swap.hosts_after):
            node = self.node(rank)
            if node.host != host:
                node.host = host
                node.swapped_in = ""
        if swap.kind == "spare" and swap.node_rank < len(swap.hosts_after):
            node = self.node(swap.node_rank)
            node.swapped_in = swap.replaced_words()

    def swap_badge(self) -> str:
        """``RECOVERING node 1`` while a swap waits for its first step, then ``1 swap VERIFIED`` (the resume
        check's word; ``NOT VERIFIED`` when it differs); empty for a run that never swapped."""
        if not self.swaps:
            return ""
        last = self.swaps[-1]
        if not last.settled:
            return f"RECOVERING node {last.node_rank}"
        word = {"none": "FROM STEP 0", "unchecked": "UNCHECKED", "resharded": "RESHARDED"}.get(last.verdict or "", "VERIFIED" if last.recovered
                                                                      else f"NOT VERIFIED ({last.verdict})")
        return f"{len(self.swaps)} swap{'s' if len(self.swaps) != 1 else ''} {word}"

    @property
    def stalled(self) -> bool:
        return self.state == RunState.RUNNING and self.detail.startswith("stalled")

    def why(self) -> str:
        """What a user should read first: why the run failed (its triage, else its last word), that it
        is stalled, or that its resume differs from its checkpoint; empty while all is well."""
        if self.stalled or (self.state == RunState.RUNNING and self.detail.startswith("idle GPUs")):
            return self.detail
        triage = self.triage
        if self.state == RunState.CANCELLED and triage is not None and triage.signature == "idle":
            return f"cancelled: {triage.summary}"
        if self.state in (RunState.FAILED, RunState.TIMED_OUT):
            summary = triage.summary if triage is not None else None
            return f"{self.state.value}: {summary or self.detail or 'no reason was recorded'}"
        own = bool(self.swaps) and bool(self.swaps[-1].loss_note)  # the check's loss jump, settled by the swap
        if self.resume_check is not None and self.resume_check.differs and not own:
            return "resume differs: " + "; ".join(self.resume_check.differs)
        if self.swaps and not self.state.is_final:
            return f"{self.swaps[-1].state_word}: {self.swaps[-1].words()}"
        if self.state == RunState.SUCCEEDED and self.detail.startswith("trained nothing"):
            return self.detail
        return self.continues

    def memory_words(self) -> str:
        """The memory prediction beside the highest peak a rank has measured (empty: nothing predicted)."""
        if self.fit is None:
            return ""
        peaks = {rank: m.measured_peak_gib for rank, m in self.memory.items() if m.measured_peak_gib is not None}
        top = max(peaks, key=lambda rank: peaks[rank] or 0.0) if peaks else None
        return "memory: " + MemoryCheck(self.fit, peaks.get(top) if top is not None else None, top, len(peaks)).words()

    def resume_badge(self) -> str:
        """``resume VERIFIED`` (``RESHARDED``, ``DIFFERS``, ``UNCHECKED``) for the summary line; empty: no resume."""
        if self.resume_check is None:
            return ""
        if self.resume_check.verdict == "differs" and self.swaps and self.swaps[-1].loss_note and self.swaps[-1].verdict:
            return f"resume {self.swaps[-1].verdict.upper()}"  # the jump was the run's own: the swap settled it
        return f"resume {self.resume_check.verdict.upper()}"

    def mix_words(self) -> str:
        """A mixture's realised share of each source against its weight (empty: one source)."""
        if self.data is None or not self.data.sources:
            return ""
        return mix_words(self.data.sources, self.mix_rows)

    def node(self, rank: int) -> NodeView:
        return self.nodes.setdefault(rank, NodeView(rank))

    def _metrics(self, event: MetricsRecorded, now: float) -> None:
        r = event.record
        if r.max_steps:
            self.max_steps = r.max_steps
        if r.eval_loss is not None:
            self.eval_loss.append(r.eval_loss)
        if r.kind == KIND_RESUME_CHECK and (self.resume_basis is None
                                             or not self.resume_basis.not_a_resume(self.attempt)):
            self.resume_check = ResumeCheck.from_record(r) or self.resume_check
        if r.kind == KIND_FIT:
            self.fit = FitSummary.from_record(r) or self.fit
        if r.kind == KIND_DATA:
            self.data = DataSummary.from_record(r) or self.data
        if r.kind != "train":
            return
        self.mix_rows = mix_rows(r) or self.mix_rows
        self.step = max(self.step, r.step)
        at = r.time if r.time is not None and r.time <= now + 60 else now  # a node's clock a little ahead: fine
        if self.first_step_at is None:
            self.first_step_at = (at, r.step)
        if self.last_step_at is None or r.step >= self.last_step_at[1]:
            self.last_step_at = (max(at, self.last_step_at[0]) if self.last_step_at else at, r.step)
        if r.loss is not None:
            self.loss.append(r.loss)
        if r.lr is not None:
            self.lr.append(r.lr)
        if r.tokens_per_s is not None:
            self.tokens_per_s = r.tokens_per_s
            self.throughput.append(r.tokens_per_s)
        if r.mfu is not None:
            self.mfu = r.mfu
        if r.router_aux_loss is not None:
            self.router_aux_loss = r.router_aux_loss
        if r.rank_step_s:
            self.rank_step_s = r.rank_step_s
        for mem in r.memory:
            self.memory[mem.rank] = mem

    def elapsed_s(self, now: float | None = None) -> float | None:
        if self.started_at is None:
            return None
        return (self.ended_at or (time.time() if now is None else now)) - self.started_at

    def eta_s(self, now: float | None = None) -> float | None:
        """Remaining time at the step rate between the first and the newest step (their own times, so a
        monitor opened late or a burst of records read at once does not skew it), counted down since the
        newest step; ``None`` before two steps, and once no step has come for ``ETA_GAP_STEPS`` step times
        (a hang: no honest figure then, the stall line says more)."""
        if self.first_step_at is None or self.last_step_at is None or not self.max_steps or self.state.is_final:
            return None
        now = time.time() if now is None else now
        (t0, s0), (t1, s1) = self.first_step_at, self.last_step_at
        if s1 <= s0 or t1 <= t0:
            return None
        per_step = (t1 - t0) / (s1 - s0)
        if now - t1 > max(ETA_GAP_STEPS * per_step, ETA_GAP_MIN_S):
            return None
        return max(0.0, (self.max_steps - s1) * per_step - max(0.0, now - t1))

    def first_error(self) -> tuple[int, int, str] | None:
        """(node, line number, line) of the earliest-numbered error on any node."""
        found = [(n.node_rank, *n.first_error) for n in self.nodes.values() if n.first_error]
        return min(found, key=lambda f: (f[1], f[0])) if found else None

    def node_step_s(self, node_rank: int) -> float | None:
        """The slowest rank's own work in the newest step on that node (``None``: no per-rank times, or
        ranks that do not divide evenly over the nodes)."""
        world, nodes = len(self.rank_step_s), len(self.nodes)
        if not world or not nodes or world % nodes:
            return None
        per_node = world // nodes
        times = [t for t in self.rank_step_s[node_rank * per_node:(node_rank + 1) * per_node] if t is not None]
        return max(times) if times else None
