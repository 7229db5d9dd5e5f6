"""For the interconnect test's tests: a node's result as the node writes it."""

from __future__ import annotations

from trainer.nettest.node import ring_pairs

MIB = 1 << 20


def result(nnodes=3, local=1, pair_s=(0.1, 0.5, 0.5), size=4 * MIB) -> dict:
    """A result as ``trainer/nettest/node.py`` writes it: every collective takes 0.1 s at ``size``."""
    world = nnodes * local
    ops = {op: [[0.09, 0.1, 0.2]] for op in ("all_gather", "reduce_scatter", "all_reduce")}
    scopes = [{"name": "world", "ranks": list(range(world)), "ops": ops}]
    if local > 1:
        scopes += [{"name": "across_nodes", "ranks": [n * local for n in range(nnodes)], "ops": ops}]
        scopes += [{"name": f"node{n}", "ranks": list(range(n * local, (n + 1) * local)), "ops": ops}
                   for n in range(nnodes)]
    pairs = [{"round": r, "a": a, "b": b, "bytes": size, "times": [t, t, t]}
             for (r, a, b), t in zip(ring_pairs(nnodes), pair_s, strict=False)]
    return {"version": 1, "backend": "gloo", "device": "cpu", "world_size": world, "nnodes": nnodes,
            "local_world_size": local, "iters": 3, "sizes": [size], "scopes": scopes, "pairs": pairs,
            "phases": {"world": 1.0}}


def noise(a: int, b: int) -> float:
    """A steady factor in [0.75, 1.25] per pair of nodes (a shared network is not even)."""
    return 0.75 + ((a * 7919 + b * 104729) % 101) / 200
