"""The collective a stalled run is stuck in, from torch's flight recorder dumps (one JSON per rank): for
each process group, the highest collective sequence number any rank entered, and the ranks that never
entered it. Pure; the dumps come from the nodes and are decoded here, defensively.

Torch ships its own analyser (``python -m torch.distributed.flight_recorder.fr_trace``), but it needs torch,
which the operator's side never imports; this reads the same fields (``collective_seq_id``,
``profiling_name``, ``pg_id``) of the JSON dump.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from launcher.words import plural


@dataclass(frozen=True)
class RankDump:
    node: int
    rank: int
    text: str
    """The rank's ``_dump_fr_trace_json()``, as the node sent it."""


@dataclass(frozen=True)
class Stuck:
    group: str
    seq: int
    op: str
    missing: tuple[int, ...]
    """Ranks whose recorder never entered collective ``seq`` of the group."""
    waiting: tuple[int, ...]
    """Ranks that entered it and wait in it."""
    nodes: dict[int, int]
    """Node of each rank named."""

    @property
    def says(self) -> str:
        group = "" if self.group in ("0", "default_pg") else f" of process group {self.group}"
        if not self.missing:
            return (f"every rank is in {self.op} #{self.seq}{group} (flight recorder): no rank is missing from it; "
                    "a peer or the network is slow, or a rank is stuck inside it")
        return (f"{_ranks(self.missing, self.nodes)} never entered {self.op} #{self.seq}{group}; "
                f"{_ranks(self.waiting, self.nodes)} {'waits' if len(self.waiting) == 1 else 'wait'} in it "
                "(flight recorder)")


def stuck_collectives(dumps: list[RankDump]) -> list[Stuck]:
    """What each process group waits for, the group whose collective is furthest behind first."""
    last: dict[str, dict[int, tuple[int, str]]] = {}
    nodes = {d.rank: d.node for d in dumps}
    known = set()
    for d in dumps:
        entries = _entries(d.text)
        if entries is None:
            continue
        known.add(d.rank)
        for e in entries:
            group, seq, op = e
            if seq > last.setdefault(group, {}).get(d.rank, (-1, ""))[0]:
                last[group][d.rank] = (seq, op)
    out = []
    for group, per_rank in last.items():
        top = max(seq for seq, _ in per_rank.values())
        op = next(o for s, o in per_rank.values() if s == top)
        members = known if group == "0" else set(per_rank)  # every rank is in the default group
        waiting = tuple(sorted(r for r, (s, _) in per_rank.items() if s == top))
        missing = tuple(sorted(r for r in members if per_rank.get(r, (-1, ""))[0] < top))
        out.append(Stuck(group, top, op, missing, waiting, nodes))
    return sorted(out, key=lambda s: (not s.missing, s.seq))


def _entries(text: str) -> list[tuple[str, int, str]] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("entries", []), list):
        return None
    out = []
    for e in data.get("entries", []):
        if not isinstance(e, dict) or e.get("is_p2p") is True:
            continue
        seq, name, group = e.get("collective_seq_id"), e.get("profiling_name"), e.get("pg_id", 0)
        if _count(seq) and _count(group) is not None and isinstance(name, str):
            op = name.split(":", 1)[-1]
            out.append((str(group), seq, "".join(c for c in op if c.isalnum() or c == "_")[:40] or "collective"))
    return out


def _count(value) -> int | None:
    """A non-negative integer as sent, or ``None`` (JSON ``true`` is not a number here)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _ranks(ranks: tuple[int, ...], nodes: dict[int, int]) -> str:
    if not ranks:
        return "no rank"
    by_node: dict[int, list[int]] = {}
    for r in ranks:
        by_node.setdefault(nodes.get(r, -1), []).append(r)
    word = "rank" if len(ranks) == 1 else "ranks"
    parts = [f"{_list(rs)} (node {n})" if n >= 0 else _list(rs) for n, rs in sorted(by_node.items())]
    if len(parts) > 4:
        return f"{len(ranks)} {word} on {plural(len(by_node), 'node')} ({_list(list(ranks))})"
    return f"{word} " + ", ".join(parts)


def _list(ranks: list[int]) -> str:
    """``0-4, 6, 9-12``: runs of ranks, short however many there are."""
    runs, start, prev = [], None, None
    for r in sorted(ranks):
        if start is None:
            start = prev = r
        elif prev is not None and r == prev + 1:
            prev = r
        else:
            runs.append((start, prev))
            start = prev = r
    if start is not None:
        runs.append((start, prev))
    return ", ".join(f"{a}" if a == b else (f"{a}, {b}" if b == a + 1 else f"{a}-{b}") for a, b in runs)
