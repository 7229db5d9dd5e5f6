"""A measured test as rows and sentences, the same for the CLI, ``--json`` and the app (what only the front ends
say of it, its headline and its pairs, is :mod:`launcher.present.nettest`)."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.nettest.figures import Measured, Scope, Verdict, judge_pairs
from launcher.words import fmt_bandwidth, fmt_message_size, node_at, node_name
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
    return f"inside {node_at(index, nodes[index])}" if 0 <= index < len(nodes) else f"inside {scope.name}"


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
        figure = f"{fmt_bandwidth(f.busbw)} all-gather bus bandwidth against {fmt_bandwidth(f.reference)} for the fast pairs " \
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


def cut_lines(m: Measured, nodes: tuple[str, ...]) -> list[str]:
    """What ``--quick``'s time budget cut, each size with the figure it judged by and what it would have
    cost (a warm-up and the fewest timed runs of each collective)."""
    labels = {"world": "whole world", "across_nodes": "across nodes", "pairs": "pairs of nodes"}
    out = []
    for c in m.cuts:
        number = ascii_int(c.scope[4:]) if c.scope.startswith("node") else None
        index = -1 if number is None else number
        label = labels.get(c.scope) or (f"inside {node_name(index, nodes)}" if index >= 0 else c.scope)
        what = f"cut to {fmt_message_size(c.kept)}" if c.kept else "skipped"
        budget = f"a round's budget of {c.budget_s:.2f} s" if c.scope == "pairs" else \
            f"the {c.budget_s:.1f} s left of the phase's budget"
        out.append(f"{label}: {fmt_message_size(c.size)} {what}: at {fmt_bandwidth(c.busbw)} it would take {c.predicted_s:.1f} s, "
                   f"over {budget}")
    return out


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
