"""An interconnect test as only the front ends say it: its headline, its one-line summary (the run monitor's
header), its pairs of nodes as lines (``fsdp-tui nettest``) and as bars (the app's chart). The rows, the
verdict's and the budget's words are the core's (``launcher.api.nettests``: :meth:`Judged.verdict_lines`,
:meth:`Judged.cut_lines`): ``--json`` and ``show`` write them too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.words import fmt_bandwidth, fmt_message_size, node_name, plural

if TYPE_CHECKING:
    from launcher.api.nettests import Judged, Measured


def headline(m: Measured) -> str:
    """The test in one line: its nodes and processes, backend and device, and the whole world's all-gather
    bus bandwidth at its largest size."""
    world = m.scope("world")
    ag = world.largest("all_gather") if world else None
    return (f"{plural(m.nnodes, 'node')} x {plural(m.local_world_size, 'process')}, {m.backend} on {m.device}; "
            f"whole world all-gather {fmt_bandwidth(ag.busbw) if ag else '-'} bus bandwidth at "
            f"{fmt_message_size(ag.nbytes) if ag else '-'}")


def summary(judged: Judged) -> str:
    """The test in one line: its whole world's all-gather bus bandwidth and its verdict's first words (the run
    monitor's header)."""
    world = judged.measured.scope("world")
    gather = world.largest("all_gather") if world else None
    return (f"{fmt_bandwidth(gather.busbw) if gather else '-'} all-gather bus bandwidth over the whole world; "
            f"{judged.verdict_lines()[0].split(' (')[0]}")


def pair_lines(m: Measured, nodes: tuple[str, ...]) -> list[str]:
    """One line per pair of nodes measured, in the order they ran: its round, the two nodes, its bus
    bandwidth, its size and its times."""
    return [f"round {p.round + 1}{' (tournament)' if p.stage == 'tournament' else ''}: {node_name(p.a, nodes)} - "
            f"{node_name(p.b, nodes)}: {fmt_bandwidth(p.busbw)} ({fmt_message_size(p.nbytes)} all-gather, "
            f"{_runs(p)})"
            for p in m.pairs]


def pair_bars(m: Measured) -> list[tuple[str, float]]:
    """One bar per pair of nodes, ``("a-b", busbw)``: a pair measured twice (a slow link, again) shows the
    figure the verdict counts, its better one, and says so in its label."""
    best: dict[tuple[int, int], float] = {}
    times: dict[tuple[int, int], int] = {}
    for p in m.pairs:
        key = (min(p.a, p.b), max(p.a, p.b))
        best[key] = max(best.get(key, 0.0), p.busbw)
        times[key] = times.get(key, 0) + 1
    return [(f"{a}-{b}" + (f" (best of {times[(a, b)]})" if times[(a, b)] > 1 else ""), bw)
            for (a, b), bw in best.items()]


def _runs(p) -> str:
    if p.best_s is None:
        return f"median {p.median_s * 1e3:.1f} ms"
    return f"fastest of {plural(p.runs, 'run')} {p.best_s * 1e3:.1f} ms, median {p.median_s * 1e3:.1f} ms"
