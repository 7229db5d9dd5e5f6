"""A measured test as rows and sentences, the same for the CLI, ``--json`` and the app."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.nettest.figures import Measured, Scope, Verdict, judge_pairs, rate, size
from launcher.words import plural
from trainer.wire.ckpt_layout import ascii_int
from trainer.wire.nettest_pairs import TOURNAMENT_ROUNDS


@dataclass(frozen=True)
class Row:
    scope: str
    """``whole world``, ``across nodes`` or ``inside <node>``."""
    op: str
    nbytes: int
    median_s: float
    spread: float
    algbw: float
    busbw: float


def scope_label(scope: Scope, nodes: tuple[str, ...]) -> str:
    if scope.name == "world":
        return "whole world"
    if scope.name == "across_nodes":
        return "across nodes"
    index = ascii_int(scope.name[4:]) if scope.name.startswith("node") else None
    index = -1 if index is None else index
    return f"inside node {index} ({nodes[index]})" if 0 <= index < len(nodes) else f"inside {scope.name}"


def rows(m: Measured, nodes: tuple[str, ...]) -> list[Row]:
    out = []
    for scope in m.scopes:
        label = scope_label(scope, nodes)
        if scope.name == "world" and m.nnodes > 1 and m.local_world_size == 1:
            label = "whole world = across nodes"
        elif scope.name == "world" and m.nnodes == 1:
            label = "whole world = inside node 0" + (f" ({nodes[0]})" if nodes else "")
        for f in scope.figures:
            out.append(Row(label, f.op, f.nbytes, f.median_s, f.spread, f.algbw, f.busbw))
    return out


def node_name(rank: int, nodes: tuple[str, ...]) -> str:
    return f"node {rank} ({nodes[rank]})" if 0 <= rank < len(nodes) else f"node {rank}"


def verdict_lines(verdict: Verdict, nodes: tuple[str, ...]) -> list[str]:
    """The verdict in words, with the rule it applied."""
    rule = (f"(a pair's figure is its fastest run; a pair is slow under {verdict.threshold:.2f}x the median "
            f"of the fast pairs, those at "
            f"{verdict.threshold:.2f}x the fastest or more; a node is slow when all its pairs are, one of them "
            "with a node that is fast elsewhere; a link, when one pair of two such nodes is, measured twice)")
    if verdict.note:
        return [verdict.note]
    if not verdict.findings:
        return [f"no slow node or link {rule}"]
    out = []
    for f in verdict.findings:
        figure = f"{rate(f.busbw)} all-gather bus bandwidth against {rate(f.reference)} for the fast pairs " \
                 f"({f.ratio:.2f}x)"
        if f.kind == "unconfirmed":
            out.append(f"unconfirmed: {node_name(f.nodes[0], nodes)}: every pair slow ({figure}), but it never "
                       f"met a fast node within the {TOURNAMENT_ROUNDS} tournament rounds: it is slow or only "
                       "beside slow nodes; test it with a node you trust")
            continue
        who = node_name(f.nodes[0], nodes) if f.kind == "node" else \
            f"the link {node_name(f.nodes[0], nodes)} - {node_name(f.nodes[1], nodes)}"
        out.append(f"slow {f.kind}: {who}: {figure}")
    return [*out, rule]


def pair_lines(m: Measured, nodes: tuple[str, ...]) -> list[str]:
    return [f"round {p.round + 1}{' (tournament)' if p.stage == 'tournament' else ''}: {node_name(p.a, nodes)} - "
            f"{node_name(p.b, nodes)}: {rate(p.busbw)} ({size(p.nbytes)} all-gather, {_runs(p)})"
            for p in m.pairs]


def cut_lines(m: Measured, nodes: tuple[str, ...]) -> list[str]:
    """What ``--quick``'s time budget cut, each size with the figure it judged by and what it would have
    cost (a warm-up and the fewest timed runs of each collective)."""
    labels = {"world": "whole world", "across_nodes": "across nodes", "pairs": "pairs of nodes"}
    out = []
    for c in m.cuts:
        number = ascii_int(c.scope[4:]) if c.scope.startswith("node") else None
        index = -1 if number is None else number
        label = labels.get(c.scope) or (f"inside {node_name(index, nodes)}" if index >= 0 else c.scope)
        what = f"cut to {size(c.kept)}" if c.kept else "skipped"
        budget = f"a round's budget of {c.budget_s:.2f} s" if c.scope == "pairs" else \
            f"the {c.budget_s:.1f} s left of the phase's budget"
        out.append(f"{label}: {size(c.size)} {what}: at {rate(c.busbw)} it would take {c.predicted_s:.1f} s, "
                   f"over {budget}")
    return out


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


def headline(m: Measured) -> str:
    world = m.scope("world")
    ag = world.largest("all_gather") if world else None
    return (f"{plural(m.nnodes, 'node')} x {plural(m.local_world_size, 'process')}, {m.backend} on {m.device}; whole world "
            f"all-gather {rate(ag.busbw) if ag else '-'} bus bandwidth at {size(ag.nbytes) if ag else '-'}")


def to_dict(m: Measured, nodes: tuple[str, ...], verdict: Verdict | None = None) -> dict:
    """The figures for scripts (``--json``): bandwidths in bytes per second, times in seconds."""
    verdict = verdict or judge_pairs(m.pairs)
    return {
        "backend": m.backend, "device": m.device, "nodes": list(nodes), "nnodes": m.nnodes,
        "local_world_size": m.local_world_size, "world_size": m.world_size, "iters": m.iters,
        "figures": [{"scope": r.scope, "op": r.op, "bytes": r.nbytes, "median_s": r.median_s,
                     "spread": round(r.spread, 4), "algbw": r.algbw, "busbw": r.busbw} for r in rows(m, nodes)],
        "pairs": [{"a": p.a, "b": p.b, "round": p.round, "stage": p.stage, "bytes": p.nbytes,
                   "median_s": p.median_s, "best_s": p.best_s, "runs": p.runs, "busbw": p.busbw} for p in m.pairs],
        "verdict": {"threshold": verdict.threshold, "note": verdict.note,
                    "slow_nodes": [{"node": n, "host": nodes[n] if n < len(nodes) else ""}
                                   for n in verdict.slow_nodes],
                    "findings": [{"kind": f.kind, "nodes": list(f.nodes), "busbw": f.busbw,
                                  "reference": f.reference, "ratio": round(f.ratio, 3)} for f in verdict.findings],
                    "text": verdict_lines(verdict, nodes)},
        "cuts": [{"scope": c.scope, "size": c.size, "kept": c.kept, "busbw": c.busbw, "predicted_s": c.predicted_s,
                  "budget_s": c.budget_s, "text": line} for c, line in zip(m.cuts, cut_lines(m, nodes), strict=True)],
        "phases_s": m.phases,
    }
