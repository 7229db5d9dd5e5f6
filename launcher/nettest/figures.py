"""From the raw times a nettest job measured to bandwidths and a verdict; pure, no I/O.

Bandwidths follow nccl-tests (``doc/PERFORMANCE.md`` there): for a message of ``S`` bytes (the gathered
output of an all-gather, the input of a reduce-scatter or all-reduce) taking ``t`` seconds on ``n``
ranks, the algorithm bandwidth is ``S / t``, and the bus bandwidth, what each rank's link carried and
therefore comparable across rank counts and with the link's own speed, is ``algbw * (n-1)/n`` for
all-gather and reduce-scatter and ``algbw * 2(n-1)/n`` for all-reduce.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from trainer.wire import nettest_pairs as _pairs
from trainer.wire.nettest_budget import Cut

OPS = ("all_gather", "reduce_scatter", "all_reduce")
SLOW_RATIO = _pairs.SLOW_RATIO


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests)."""
    if n < 2:
        return 0.0
    if op == "all_reduce":
        return 2 * (n - 1) / n
    return (n - 1) / n


@dataclass(frozen=True)
class Figure:
    """One collective at one size in one scope."""

    op: str
    nbytes: int
    median_s: float
    min_s: float
    max_s: float
    n: int

    @property
    def algbw(self) -> float:
        """Bytes per second (median time)."""
        return self.nbytes / self.median_s if self.median_s > 0 else 0.0

    @property
    def busbw(self) -> float:
        return self.algbw * bus_factor(self.op, self.n)

    @property
    def spread(self) -> float:
        """(slowest - fastest) / median iteration: how steady the figure is."""
        return (self.max_s - self.min_s) / self.median_s if self.median_s > 0 else 0.0


@dataclass(frozen=True)
class Scope:
    """A set of ranks measured together: the whole world, one rank per node, or one node's ranks."""

    name: str
    """``world``, ``across_nodes`` or ``node<N>``."""
    ranks: tuple[int, ...]
    figures: tuple[Figure, ...]

    def largest(self, op: str) -> Figure | None:
        """The figure of ``op`` at the largest size: the one that says what the link can carry."""
        mine = [f for f in self.figures if f.op == op]
        return max(mine, key=lambda f: f.nbytes) if mine else None


@dataclass(frozen=True)
class PairFigure:
    a: int
    b: int
    round: int
    nbytes: int
    median_s: float
    stage: str = "neighbours"
    """``neighbours`` (each node with its ring neighbour) or ``tournament`` (suspects against fast nodes)."""
    best_s: float | None = None
    """The fastest timed run (``None``: the median stands for it)."""
    runs: int = 0

    @property
    def busbw(self) -> float:
        """The pair's figure, from its fastest run (``trainer.wire.nettest_pairs.pair_figure``): a link is never
        faster than it is, while any run can be slowed by a process that waited for a core."""
        fastest = self.best_s if self.best_s is not None else self.median_s
        return self.nbytes / fastest * bus_factor("all_gather", 2) if fastest > 0 else 0.0


@dataclass(frozen=True)
class Finding:
    """A node whose every pair is slow, one of them with a fast node; one slow pair between two fast
    nodes (a link); or a node whose every pair is slow that never met a fast node within the rounds
    (unconfirmed: it is slow, or it only ever met slow nodes)."""

    kind: Literal["node", "link", "unconfirmed"]
    nodes: tuple[int, ...]
    busbw: float
    """The best of its pairs (a node) or the pair's (a link), bytes/s."""
    reference: float
    """The median of the fast pairs, bytes/s."""

    @property
    def ratio(self) -> float:
        return self.busbw / self.reference if self.reference > 0 else 0.0


@dataclass(frozen=True)
class Verdict:
    findings: tuple[Finding, ...]
    note: str = ""
    """Why no comparison could be made (a single pair), when so."""
    threshold: float = SLOW_RATIO

    @property
    def slow_nodes(self) -> tuple[int, ...]:
        return tuple(n for f in self.findings if f.kind == "node" for n in f.nodes)


@dataclass(frozen=True)
class Measured:
    """A nettest job's result, decoded once where it enters (it comes from a node: untrusted)."""

    backend: str
    device: str
    world_size: int
    nnodes: int
    local_world_size: int
    sizes: tuple[int, ...]
    iters: int
    scopes: tuple[Scope, ...]
    pairs: tuple[PairFigure, ...]
    phases: dict[str, float]
    gemm_tflops: tuple[float, ...] = ()
    """Each rank's GPU bf16 GEMM TFLOP/s (GPU nodes only)."""
    model_params: int | None = None
    """The workload's model's parameters, where its config was readable on the nodes."""
    block_params: int | None = None
    cuts: tuple[Cut, ...] = ()
    """The sizes ``--quick``'s time budget cut or skipped, with the figure it judged by."""

    def scope(self, name: str) -> Scope | None:
        return next((s for s in self.scopes if s.name == name), None)

    @property
    def across(self) -> Scope | None:
        """One rank per node: the inter-node figure (the world itself with one process per node)."""
        if self.nnodes < 2:
            return None
        return self.scope("across_nodes") or (self.scope("world") if self.local_world_size == 1 else None)

    @property
    def inside(self) -> tuple[Scope, ...]:
        return tuple(s for s in self.scopes if s.name.startswith("node"))


class BadResult(ValueError):
    """The result file is not what a nettest job writes."""


def _num(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise BadResult(f"{what}: not a non-negative number")
    return float(value)


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadResult(f"{what}: not a non-negative integer")
    return value


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise BadResult(f"{what}: not text")
    return "".join(ch for ch in value if ch.isprintable())[:200]


def _stats(times: object, what: str) -> tuple[float, float, float]:
    if not isinstance(times, list) or not times:
        raise BadResult(f"{what}: no times")
    values = [_num(t, what) for t in times]
    return statistics.median(values), min(values), max(values)


def decode(data: object) -> Measured:
    """Decode a nettest result (``trainer/nettest/node.py``); :class:`BadResult` names what is wrong."""
    if not isinstance(data, dict) or data.get("version") != 1:
        raise BadResult("not a nettest result (version 1)")
    sizes = tuple(_int(s, "sizes") for s in _list(data.get("sizes") or [], "sizes"))
    scopes = []
    for raw in _list(data.get("scopes") or [], "scopes"):
        raw = _mapping(raw, "scopes")
        name = _text(raw.get("name"), "scope name")
        ranks = tuple(_int(r, f"{name} ranks") for r in raw.get("ranks") or [])
        # A scope's own sizes where the budget cut one (older results: the test's sizes).
        own = sizes if "sizes" not in raw else tuple(_int(s, f"{name} sizes") for s in _list(raw["sizes"], name))
        figures = []
        for op in OPS:
            per_size = _list(_mapping(raw.get("ops") or {}, f"{name} ops").get(op) or [], f"{name} {op}")
            for nbytes, times in zip(own, per_size, strict=False):
                med, lo, hi = _stats(times, f"{name} {op}")
                figures.append(Figure(op, nbytes, med, lo, hi, len(ranks)))
        scopes.append(Scope(name, ranks, tuple(figures)))
    pairs = []
    for raw in _list(data.get("pairs") or [], "pairs"):
        raw = _mapping(raw, "pairs")
        med, lo, _hi = _stats(raw.get("times"), "pair times")
        stage = _text(raw.get("stage", "neighbours"), "pair stage")
        pairs.append(PairFigure(_int(raw.get("a"), "pair a"), _int(raw.get("b"), "pair b"),
                                _int(raw.get("round"), "pair round"), _int(raw.get("bytes"), "pair bytes"), med,
                                stage, lo, len(raw["times"])))
    phases = {_text(k, "phase"): _num(v, "phase time") for k, v in _mapping(data.get("phases") or {}, "phases").items()}
    return Measured(_text(data.get("backend"), "backend"), _text(data.get("device"), "device"),
                    _int(data.get("world_size"), "world_size"), _int(data.get("nnodes"), "nnodes"),
                    _int(data.get("local_world_size"), "local_world_size"), sizes,
                    _int(data.get("iters"), "iters"), tuple(scopes), tuple(pairs), phases,
                    tuple(_num(t, "gemm_tflops") for t in _list(data.get("gemm_tflops") or [], "gemm_tflops")),
                    *_model(data.get("model")), tuple(_cut(c) for c in _list(data.get("cuts") or [], "cuts")))


def _list(value, what: str) -> list:
    if not isinstance(value, list):
        raise BadResult(f"{what}: not a list")
    return value


def _mapping(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise BadResult(f"{what}: not a mapping")
    return value


def _cut(raw) -> Cut:
    if not isinstance(raw, dict):
        raise BadResult("cuts: not a mapping")
    return Cut(_text(raw.get("scope"), "cut scope"), _int(raw.get("size"), "cut size"), _int(raw.get("kept"), "cut kept"),
               _num(raw.get("busbw"), "cut busbw"), _num(raw.get("predicted_s"), "cut predicted_s"),
               _num(raw.get("budget_s"), "cut budget_s"))


def _model(raw) -> tuple[int | None, int | None]:
    if not isinstance(raw, dict):
        return None, None
    return _int(raw.get("total_params"), "model total_params"), _int(raw.get("block_params"), "model block_params")


def judge_pairs(pairs: tuple[PairFigure, ...] | list[PairFigure], threshold: float = SLOW_RATIO) -> Verdict:
    """Name the slow nodes, then the slow links, then the nodes left unconfirmed, against the median of
    the fast pairs (``trainer.wire.nettest_pairs.standing``: the rules the tournament planned its rounds by).
    An even network names nothing."""
    if not pairs:
        return Verdict((), "one node: no link between nodes to compare", threshold)
    if len({(p.a, p.b) for p in pairs}) == 1:
        return Verdict((), "two nodes: one pair, nothing to compare it with (see its figure against the "
                           "link's rated speed)", threshold)
    figures: dict[tuple[int, int], float] = {}
    for p in pairs:  # a pair measured twice (a slow link, again): its better figure
        key = (min(p.a, p.b), max(p.a, p.b))
        figures[key] = max(figures.get(key, 0.0), p.busbw)
    st = _pairs.standing(figures, threshold)

    def best(node: int) -> float:
        return max(v for p, v in figures.items() if node in p)

    findings = [Finding("node", (n,), best(n), st.reference) for n in sorted(st.slow)]
    findings += [Finding("link", p, figures[p], st.reference) for p in st.links]
    findings += [Finding("unconfirmed", (n,), best(n), st.reference) for n in sorted(st.open)]
    return Verdict(tuple(findings), "", threshold)
