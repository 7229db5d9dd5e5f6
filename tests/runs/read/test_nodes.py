"""The node rows and the odd node (pure): even runs of every size carry no mark, each kind of odd node
is marked with its figure and the others' median, and a node's line-rate window stays bounded."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from launcher.events import (
    GpuSample,
    GpuTelemetry,
    MetricsRecorded,
    NodeLines,
    NodeState,
    NodeStateChanged,
    NodeUsage,
    RunState,
    RunStateChanged,
)
from launcher.runs.read.nodes import node_rows, odd_nodes
from launcher.runs.read.view import LINE_RATE_WINDOW_S, LineRate, RunView
from trainer.wire.protocol import MetricRecord

NOW = 10_000.0
START = NOW - 300


@dataclass
class N:
    """One node of a made-up run: its figures at ``NOW``."""

    rate: float = 40.0
    age: float = 0.5
    cpu: float | None = 100.0
    rss: float | None = 2000.0
    gpu: float | None = None
    gpu_gib: float | None = None
    state: NodeState = NodeState.RUNNING
    code: int | None = None
    ended: float | None = None
    """Seconds after START when the node stopped."""


def build(nodes: list[N], run_state: RunState = RunState.RUNNING) -> RunView:
    """The view the monitor would hold after these nodes' events (each line batch at its own second)."""
    v = RunView("r")
    v.apply(RunStateChanged("r", RunState.RUNNING, 1), now=START)
    for rank, n in enumerate(nodes):
        if n.state == NodeState.PENDING:
            v.node(rank)
            continue
        v.apply(NodeStateChanged("r", rank, f"host-{rank}", NodeState.RUNNING), now=START)
        last = NOW - n.age
        t, owed = last - 2 * LINE_RATE_WINDOW_S, 0.0
        while n.rate and t <= last:
            owed += n.rate
            if int(owed):
                v.apply(NodeLines("r", rank, ("x",) * int(owed), 0), now=t)
                owed -= int(owed)
            t += 1
        if n.rate and n.age >= 0:
            v.apply(NodeLines("r", rank, ("last",), 0), now=last)
        if n.cpu is not None:
            v.apply(NodeUsage("r", rank, n.cpu, n.rss or 0.0, 3, NOW), now=NOW)
        if n.gpu is not None:
            v.apply(GpuTelemetry("r", rank, (GpuSample(0, "H100", (n.gpu_gib or 1.0) * 1024, 81920, n.gpu),)), now=NOW)
        if n.state != NodeState.RUNNING:
            v.apply(NodeStateChanged("r", rank, f"host-{rank}", n.state, n.code), now=START + (n.ended or 200))
    if run_state.is_final:
        v.apply(RunStateChanged("r", run_state, 1), now=NOW)
    return v


def noisy(count: int, seed: int, gpu: bool = False) -> list[N]:
    rnd = random.Random(seed)
    return [N(rate=40 * rnd.uniform(0.7, 1.3), age=rnd.uniform(0, 2), cpu=rnd.uniform(80, 120),
              rss=rnd.uniform(2000, 2600), gpu=rnd.uniform(85, 99) if gpu else None,
              gpu_gib=rnd.uniform(30, 34) if gpu else None) for _ in range(count)]


def marks(nodes: list[N], run_state: RunState = RunState.RUNNING) -> dict[int, list[str]]:
    return {r.node: [m.what for m in r.odd] for r in odd_nodes(node_rows(build(nodes, run_state), NOW))}


def with_(nodes: list[N], **at: N) -> list[N]:
    for key, node in at.items():
        nodes[int(key.removeprefix("n"))] = node
    return nodes


EVEN = [
    *[(f"{count} nodes, noise, seed {seed}", noisy(count, seed, gpu=seed % 2 == 0))
      for count in (2, 3, 4, 5, 8, 16, 32, 64) for seed in (1, 2, 3)],
    ("only rank 0's node prints", [N(rate=50, age=0.2)] + [N(rate=0.02, age=a) for a in (5, 30, 59, 200, 12, 44, 80)]),
    ("all idle", [N(rate=0, age=-1, cpu=c, rss=300, gpu=0.0, gpu_gib=0.5) for c in (0, 0.5, 1, 0.2, 0, 2, 1, 0)]),
    ("all quiet for long", [N(rate=0.0, age=-1, cpu=100) for _ in range(8)]),
    ("quiet run, small RSS differences", [N(rate=0.5, age=a, rss=r) for a, r in
                                           ((3, 200), (10, 900), (1, 300), (5, 250), (8, 800))]),
    ("finished run", [N(state=NodeState.EXITED, code=0, ended=200 + i * 0.1, age=50 + i) for i in range(8)]),
    ("finished run, one node quiet at the end", with_([N(state=NodeState.EXITED, code=0, ended=200) for _ in range(8)],
                                                       n2=N(state=NodeState.EXITED, code=0, ended=200, age=100))),
    ("nodes not yet started", [N(), N(), N(), N()] + [N(state=NodeState.PENDING) for _ in range(4)]),
    ("three running, one quiet: too few to compare", [N(), N(age=60), N(), N(state=NodeState.PENDING)]),
    ("all failed in the same second", [N(state=NodeState.EXITED, code=1, ended=100 + i * 0.2) for i in range(4)]),
]


@pytest.mark.parametrize("nodes", [n for _, n in EVEN], ids=[i for i, _ in EVEN])
def test_an_even_run_marks_no_node(nodes):
    state = RunState.SUCCEEDED if all(n.state == NodeState.EXITED for n in nodes) else RunState.RUNNING
    assert marks(nodes, state) == {}


ODD = [
    ("one quiet of 8", with_(noisy(8, 5), n3=N(age=40)), {3: ["quiet"]}),
    ("one quiet of 64", with_(noisy(64, 6), n63=N(age=45)), {63: ["quiet"]}),
    ("one slow of 8", with_(noisy(8, 7), n5=N(rate=3)), {5: ["slow_output"]}),
    ("one CPU-starved of 16 (a cgroup quota)", with_(noisy(16, 8), n9=N(cpu=10)), {9: ["cpu_idle"]}),
    ("one busy while the others wait", [N(cpu=c) for c in (1, 2, 0.5, 1, 95, 1, 2, 0)], {4: ["cpu_busy"]}),
    ("memory far above", with_(noisy(8, 9), n1=N(rss=9000)), {1: ["memory"]}),
    ("GPU idle while the others work", with_(noisy(8, 10, gpu=True), n6=N(gpu=2, gpu_gib=31)), {6: ["gpu_idle"]}),
    ("GPU memory far above", with_(noisy(8, 11, gpu=True), n2=N(gpu=90, gpu_gib=70)), {2: ["gpu_memory"]}),
    ("two odd of 64", with_(noisy(64, 12, gpu=True), n7=N(age=50, gpu=90, gpu_gib=31), n40=N(gpu=1, gpu_gib=31)),
     {7: ["quiet"], 40: ["gpu_idle"]}),
    ("quiet and starved at once", with_(noisy(8, 13), n0=N(age=90, cpu=0)), {0: ["quiet", "cpu_idle"]}),
    ("first to fail", [N(state=NodeState.EXITED, code=1, ended=100)]
     + [N(state=NodeState.EXITED, code=-15, ended=130) for _ in range(3)], {0: ["first_failed"]}),
    ("first to fail, lost, the others still running", [N(), N(), N(state=NodeState.LOST, ended=250), N()],
     {2: ["first_failed"]}),
]


@pytest.mark.parametrize("nodes,expected", [(n, e) for _, n, e in ODD], ids=[i for i, _, _ in ODD])
def test_the_odd_node_is_marked_and_only_it(nodes, expected):
    final = all(n.state != NodeState.RUNNING for n in nodes)
    assert marks(nodes, RunState.FAILED if final else RunState.RUNNING) == expected


def test_a_mark_carries_its_figure_the_median_and_words():
    rows = node_rows(build(with_([N(age=1) for _ in range(6)], n3=N(age=40))), NOW)
    (row,) = odd_nodes(rows)
    (mark,) = row.odd
    assert (mark.what, mark.figure, mark.median) == ("quiet", 40.0, 1.0)
    assert mark.says == "no output for 40 s (others: 1 s)"
    assert row.odd_words() == "node 3 (host-3): no output for 40 s (others: 1 s)"
    first = odd_nodes(node_rows(build([N(state=NodeState.EXITED, code=1, ended=100)]
                                      + [N(state=NodeState.EXITED, code=1, ended=130)] * 3, RunState.FAILED), NOW))
    assert first[0].odd[0].says == "failed first, 100 s into the run; the next node ended 30 s later"
    lost = odd_nodes(node_rows(build([N(), N(), N(state=NodeState.LOST, ended=250), N()]), NOW))
    assert lost[0].odd[0].says.endswith("; the others still run")
    close = odd_nodes(node_rows(build([N(state=NodeState.EXITED, code=1, ended=100)]
                                      + [N(state=NodeState.EXITED, code=-15, ended=101.5)] * 3, RunState.FAILED), NOW))
    assert close[0].odd[0].says.endswith("; the next node ended 1.5 s later")


def test_rows_carry_each_figure():
    v = build([N(rate=10, age=2, cpu=95.0, rss=300.0, gpu=80.0, gpu_gib=20.0), N(state=NodeState.PENDING)])
    v.apply(MetricsRecorded("r", MetricRecord(step=7, loss=1.0)), now=NOW)
    row0, row1 = node_rows(v, NOW)
    assert (row0.host, row0.state, row0.cpu_pct, row0.rss_mib, row0.gpu_util_pct, row0.gpu_mem_used_gib,
            row0.step, row0.last_output_age_s) == ("host-0", "running", 95.0, 300.0, 80.0, 20.0, 7, 2.0)
    assert 9 <= row0.lines_per_s <= 11
    assert (row1.state, row1.lines, row1.last_output_age_s, row1.step, row1.cpu_pct) == ("pending", 0, None, None, None)
    assert set(row0.to_dict()) >= {"node", "host", "state", "exit_code", "lines", "lines_per_s", "last_output_age_s",
                                   "cpu_pct", "rss_mib", "gpu_util_pct", "gpu_mem_used_gib", "step", "odd"}


def test_the_line_rate_window_is_bounded_and_counts_recent_seconds_only():
    rate = LineRate()
    for t in range(100_000):
        rate.add(t, 5)
    assert len(rate.buckets) == LINE_RATE_WINDOW_S
    assert rate.per_s(99_999.5) == pytest.approx(5.0)
    assert rate.per_s(99_999.5 + 10) == pytest.approx(5.0 * (LINE_RATE_WINDOW_S - 10) / LINE_RATE_WINDOW_S, rel=0.05)
    assert rate.per_s(99_999.5 + 100) == 0.0
    young = LineRate()
    young.add(50.0, 20)
    assert young.per_s(54.0, since=50.0) == pytest.approx(5.0)  # 4 s alive, not 30
    spread = LineRate()
    spread.spread(0.0, 1000.0, 10_000)  # a record: 10 lines/s on average
    assert spread.per_s(1000.0) == pytest.approx(10.0, rel=0.1)


@pytest.mark.parametrize(("ranks", "nodes", "expected"), [
    ((0.10, 0.12, 0.30, 0.11), 2, {0: 0.12, 1: 0.30}),  # two ranks a node: the node's slowest
    ((0.10, None, 0.20), 3, {0: 0.10, 1: None, 2: 0.20}),  # a rank that sent no figure
    ((0.10, 0.12, 0.30), 2, {0: None, 1: None}),  # ranks that do not divide over the nodes: not guessed
    ((), 2, {0: None, 1: None}),  # a script that sends no per-rank times
])
def test_each_row_carries_its_nodes_slowest_rank_step(ranks, nodes, expected):
    view = build([N() for _ in range(nodes)])
    view.apply(MetricsRecorded("r", MetricRecord(step=5, loss=1.0, rank_step_s=ranks)), now=NOW)
    assert {r.node: r.step_s for r in node_rows(view, NOW)} == expected
