"""Which pairs of nodes the interconnect self-test measures, and what their figures say; pure, stdlib only.

Both sides use it: the node script (``trainer/nettest/node.py``, which ships this file beside itself) plans each
round of pairs from the figures of the rounds before, the same on every rank, and the operator's side
(``launcher.nettest.figures``) reads the verdict from the same figures with the same rules.

A pair's figure is its all-gather bus bandwidth; a pair runs no faster than its slower node (or the link
between them). Neighbour pairs alone compare nodes with their ring neighbours only: when half the nodes
or more are slow alike, every neighbour pair holds a slow node and none stands out. So a bounded second
phase, the tournament, follows: one exploration round pairs every node with the nearest node it has not
met (on an alternating ring this puts fast nodes together), then each node whose pairs are all slow and
that has not yet met a fast node is paired with one, a fast node taking one suspect per round, and a slow
pair between fast nodes is measured once more (a link is named only when slow both times).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

SLOW_RATIO = 0.5
"""A pair is slow under this fraction of the reference (the median of the fast pairs): shared links and
noisy hosts vary by tens of percent, a degraded link or a NIC that fell back to a slower mode by factors."""
NEIGHBOUR_ROUNDS = 3
"""The ring's pairs take at most this many rounds (even pairs, odd pairs, the pair closing an odd ring)."""
TOURNAMENT_ROUNDS = 4
"""The tournament's rounds at most: the exploration round, then suspects against fast nodes."""

Pair = tuple[int, int]


def pair_figure(nbytes: int, times: list[float]) -> float:
    """A pair's figure: the all-gather bus bandwidth of its fastest timed run. A link is never faster than
    it is, while any one run can be slowed by a process that waited for a core (on 16 hosts sharing 2
    cores the runs of one pair varied 5-10x); a slow link or node is slow in every run."""
    fastest = min(times)
    return nbytes / fastest * 0.5 if fastest > 0 else 0.0


def ring_pairs(nnodes: int) -> list[tuple[int, int, int]]:
    """``(round, a, b)``: each node with its ring neighbour, in at most three rounds where no node is in
    two pairs at once (even pairs, odd pairs, and the pair closing an odd ring)."""
    if nnodes < 2:
        return []
    if nnodes == 2:
        return [(0, 0, 1)]
    pairs = []
    for i in range(nnodes):
        a, b = i, (i + 1) % nnodes
        rnd = 2 if (nnodes % 2 and i == nnodes - 1) else i % 2
        pairs.append((rnd, min(a, b), max(a, b)))
    return pairs


@dataclass(frozen=True)
class Standing:
    """What the pairs measured so far say about each node."""

    reference: float
    """The median of the fast pairs: those at ``threshold`` x the fastest pair or more."""
    good: frozenset[int]
    """Nodes in at least one fast pair: they are fine (a pair runs no faster than its slower node)."""
    slow: frozenset[int]
    """Nodes whose every pair is slow, one of them with a good node: the node itself is slow."""
    open: frozenset[int]
    """Nodes whose every pair is slow, none with a good node yet: slow, or only beside slow nodes."""
    links: tuple[Pair, ...]
    """Slow pairs between two good nodes: the link between them is slow."""


def standing(figures: Mapping[Pair, float], threshold: float = SLOW_RATIO) -> Standing:
    """Classify the nodes of ``figures`` (each measured pair's bus bandwidth, ``a < b``)."""
    if not figures:
        return Standing(0.0, frozenset(), frozenset(), frozenset(), ())
    best = max(figures.values())
    reference = statistics.median(v for v in figures.values() if v >= threshold * best)
    fast = {p for p, v in figures.items() if v >= threshold * reference}
    good = frozenset(n for p in fast for n in p)
    nodes = {n for p in figures for n in p}
    slow, open_ = set(), set()
    for node in nodes - good:
        partners = {a if b == node else b for a, b in figures if node in (a, b)}
        (slow if partners & good else open_).add(node)
    links = tuple(sorted(p for p in figures if p not in fast and p[0] in good and p[1] in good))
    return Standing(reference, good, frozenset(slow), frozenset(open_), links)


def tournament_round(nnodes: int, figures: Mapping[Pair, float], first: bool,
                     threshold: float = SLOW_RATIO, twice: frozenset[Pair] = frozenset()) -> list[Pair]:
    """The next tournament round's pairs (no node twice): each open node with a good node it has not met,
    each slow link measured once only (not in ``twice``) again, then, in the ``first`` round only, every
    node left with the nearest node it has not met. Empty when nothing is left to learn. Deterministic:
    every rank plans the same round from the same figures."""
    st = standing(figures, threshold)
    met = {frozenset(p) for p in figures}
    busy: set[int] = set()
    out: list[Pair] = []

    def take(a: int, b: int) -> None:
        out.append((min(a, b), max(a, b)))
        busy.update((a, b))

    goods = sorted(st.good)
    for suspect in sorted(st.open):
        partner = next((g for g in goods if g not in busy and frozenset((suspect, g)) not in met), None)
        if partner is not None:
            take(suspect, partner)
    # One slow pair between fast nodes may be a moment's noise: a link is named only when slow twice.
    for link in st.links:
        if link not in twice and not busy & set(link):
            take(*link)
    if first and nnodes > 3:
        for i in range(nnodes):
            if i in busy:
                continue
            partner = next((j for j in ((i + d) % nnodes for d in range(1, nnodes))
                            if j not in busy and frozenset((i, j)) not in met), None)
            if partner is not None:
                take(i, partner)
    return sorted(out)


def run_rounds(nnodes: int, measure, threshold: float = SLOW_RATIO) -> list[tuple[int, int, int, str]]:
    """Measure every round the test runs and return its pairs, ``(round, a, b, stage)``: the neighbour
    rounds, then the tournament while it has something to learn. ``measure(round, stage, pairs)`` runs one
    round (its pairs in parallel) and gives each pair's bus bandwidth; on the nodes it runs the collectives,
    in tests it is a fake network."""
    figures: dict[Pair, float] = {}
    done: list[tuple[int, int, int, str]] = []

    def record(rnd: int, stage: str, pairs: list[Pair]) -> None:
        for pair, value in measure(rnd, stage, pairs).items():
            figures[pair] = max(figures.get(pair, 0.0), value)  # a pair measured twice: its better figure
        done.extend((rnd, a, b, stage) for a, b in pairs)

    ring = ring_pairs(nnodes)
    rounds = sorted({r for r, _a, _b in ring})
    for rnd in rounds:
        record(rnd, "neighbours", [(a, b) for r, a, b in ring if r == rnd])
    for t in range(TOURNAMENT_ROUNDS if nnodes > 2 else 0):
        seen: dict[Pair, int] = {}
        for _r, a, b, _s in done:
            seen[(a, b)] = seen.get((a, b), 0) + 1
        pairs = tournament_round(nnodes, figures, t == 0, threshold,
                                 frozenset(p for p, count in seen.items() if count > 1))
        if not pairs:
            break
        record(len(rounds) + t, "tournament", pairs)
    return done
