"""How long ``nettest --quick`` spends where: a time budget per phase, iterations that stop when it is
spent, and message sizes cut or skipped when the first size shows that the links are slow. Pure and
stdlib only: shipped beside ``nettest.py`` (which runs it on the nodes) and read by the operator's side
(``launcher.nettest``) to word what was cut.

Every member of a collective must run the same number of iterations, or the next collective hangs. So
nothing here reads a wall clock: the clock is the sum of the iterations' times as the members agreed on
them (each iteration's slowest member, reduced over the group), the same number on every member, and
every decision is a function of it. Tests drive the same code with a fake measurement.

Without a budget (the full test) every size runs with a fixed count of iterations, as before.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

MIB = 1 << 20
OP_WEIGHT = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_reduce": 2.0}
"""An all-reduce moves twice the bytes of the other two (a reduce-scatter and an all-gather): it gets
twice their share of a size's time, and counts twice in a size's predicted cost."""
FIRST_SHARE = 0.25
"""The part of a phase's budget the first (smallest) size may use: it is there for the latency and to
estimate what the larger sizes will cost."""


@dataclass(frozen=True)
class Iterations:
    """How many times one collective runs at one size."""

    warmup: int
    """Untimed first runs (connections set up, buffers touched)."""
    min_timed: int
    """Timed runs at least, whatever the budget says: the figure is their median."""
    max_timed: int
    """Timed runs at most, however much budget is left."""


@dataclass(frozen=True)
class Budget:
    """Seconds each phase of ``--quick`` may spend measuring (the members' agreed times summed)."""

    world_s: float = 3.0
    across_s: float = 2.0
    inside_s: float = 2.0
    pair_round_s: float = 0.75
    """One round of pairs (its pairs run at once, each within this)."""
    collectives: Iterations = Iterations(warmup=1, min_timed=2, max_timed=5)
    """The table's figures: a median of 2 is enough to read a bandwidth from."""
    pairs: Iterations = Iterations(warmup=1, min_timed=3, max_timed=5)
    """The verdict's figures: a median of 3 or more, so one disturbed iteration (a process that waited for a
    core) cannot make a pair look slow and name a node."""

    def scope_s(self, scope: str) -> float:
        if scope == "world":
            return self.world_s
        return self.across_s if scope == "across_nodes" else self.inside_s

    def to_dict(self) -> dict:
        """As the result states it."""
        return {"world_s": self.world_s, "across_s": self.across_s, "inside_s": self.inside_s,
                "pair_round_s": self.pair_round_s,
                **{name: {"warmup": it.warmup, "min": it.min_timed, "max": it.max_timed}
                   for name, it in (("collectives", self.collectives), ("pairs", self.pairs))}}


QUICK = Budget()


@dataclass(frozen=True)
class Cut:
    """A message size that the budget cut (``kept`` smaller) or skipped (``kept`` 0)."""

    scope: str
    """``world``, ``across_nodes``, ``node<N>`` or ``pairs``."""
    size: int
    """The size planned, bytes."""
    kept: int
    """The size measured instead, bytes; 0: none."""
    busbw: float
    """The all-gather bus bandwidth the estimate came from, bytes/s."""
    predicted_s: float
    """What ``size`` would have taken (warm-up and the minimum of timed iterations), seconds."""
    budget_s: float
    """What was left of the phase's budget for it, seconds."""

    def to_dict(self) -> dict:
        return {"scope": self.scope, "size": self.size, "kept": self.kept, "busbw": round(self.busbw, 1),
                "predicted_s": round(self.predicted_s, 3), "budget_s": round(self.budget_s, 3)}


@dataclass
class Clock:
    """Seconds spent so far in a phase: the agreed iteration times, summed (the same on every member)."""

    spent_s: float = 0.0


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests)."""
    if n < 2:
        return 0.0
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def keep_timing(times: Sequence[float], clock: Clock, until_s: float, it: Iterations) -> bool:
    """Run another timed iteration? Yes below the minimum, no at the maximum, and in between while one
    more (as long as the median so far) still ends within ``until_s``."""
    if len(times) < it.min_timed:
        return True
    if len(times) >= it.max_timed:
        return False
    return clock.spent_s + statistics.median(times) <= until_s


def timed_runs(run_once: Callable[[], float], it: Iterations, clock: Clock, until_s: float) -> list[float]:
    """The warm-up, then timed runs while :func:`keep_timing` says so; each run's agreed seconds go on
    ``clock``. ``run_once`` runs the collective once and gives its time as the members agreed on it."""
    for _ in range(it.warmup):
        clock.spent_s += run_once()
    times: list[float] = []
    while keep_timing(times, clock, until_s, it):
        took = run_once()
        clock.spent_s += took
        times.append(took)
    return times


def cost_s(first: int, first_times: dict[str, list[float]], nbytes: int, it: Iterations) -> float:
    """Predicted seconds for every op at ``nbytes`` (warm-up and the minimum of timed runs), scaled from
    the times at ``first`` bytes. Linear in the size: at a small size the latency weighs more, so this
    over-predicts on fast links, where every size is cheap anyway, and is right on slow ones."""
    per_run = sum(statistics.median(t) for t in first_times.values() if t) * nbytes / first
    return (it.warmup + it.min_timed) * per_run


def smaller_sizes(size: int, floor: int) -> list[int]:
    """``size`` halved down to just above ``floor``: what a size can be cut to, largest first."""
    out, s = [], size
    while s > floor:
        out.append(s)
        s //= 2
    return out


def plan_sizes(first: int, first_times: dict[str, list[float]], later: Sequence[int], left_s: float,
               it: Iterations, scope: str, n: int) -> tuple[list[int], list[Cut]]:
    """The sizes after the first to measure within ``left_s``: from the largest down, each the largest of
    itself halved (down to just above the size below it) whose predicted cost fits what is left, else
    skipped. Returns the sizes (ascending) and what was cut."""
    ag = first_times.get("all_gather") or next(iter(first_times.values()), [])
    busbw = first / statistics.median(ag) * bus_factor("all_gather", n) if ag and statistics.median(ag) > 0 else 0.0
    bounds = [first, *later]
    kept: list[int] = []
    cuts: list[Cut] = []
    spare = left_s - sum(cost_s(first, first_times, s, it) for s in later)
    for i in range(len(later) - 1, -1, -1):
        size = later[i]
        full = cost_s(first, first_times, size, it)
        # What is left for this size: its own prediction plus whatever the smaller sizes do not need.
        room = full + spare
        choice = next((s for s in smaller_sizes(size, bounds[i]) if cost_s(first, first_times, s, it) <= room), 0)
        if choice != size:
            cuts.append(Cut(scope, size, choice, busbw, full, max(room, 0.0)))
        spare = room - (cost_s(first, first_times, choice, it) if choice else 0.0)
        if choice:
            kept.append(choice)
    return sorted(kept), sorted(cuts, key=lambda c: c.size)


@dataclass
class ScopeRun:
    """One scope's measured sizes and times, and what its budget cut."""

    sizes: list[int]
    times: dict[str, list[list[float]]]
    """Per op, per measured size, the timed runs' seconds."""
    cuts: list[Cut] = field(default_factory=list)
    clock: Clock = field(default_factory=Clock)


def measure_scope(sizes: Sequence[int], ops: Sequence[str], run_for: Callable[[str, int], Callable[[], float]],
                  it: Iterations, budget_s: float | None, scope: str, n: int) -> ScopeRun:
    """Every op at every size of one scope, smallest size first. With ``budget_s``: the first size within
    :data:`FIRST_SHARE` of it, the others planned from the first's figures (:func:`plan_sizes`), and each
    (size, op) given a share of what is left in proportion to its predicted cost. ``run_for(op, nbytes)``
    sets one collective up (its buffers, a barrier) and gives the function that runs it once."""
    run = ScopeRun([], {op: [] for op in ops})
    weight = sum(OP_WEIGHT.get(op, 1.0) for op in ops)

    def measure(nbytes: int, share_s: float, costs: dict[str, float]) -> None:
        start = run.clock.spent_s
        for k, op in enumerate(ops):
            # What is left of this size's share, split among the ops still to run by their cost.
            rest = sum(costs[o] for o in ops[k:]) or 1.0
            left = max(share_s - (run.clock.spent_s - start), 0.0)
            until = float("inf") if budget_s is None else run.clock.spent_s + left * costs[op] / rest
            run.times[op].append(timed_runs(run_for(op, nbytes), it, run.clock, until))
        run.sizes.append(nbytes)

    first, later = sizes[0], list(sizes[1:])
    measure(first, (budget_s or 0.0) * FIRST_SHARE, {op: OP_WEIGHT.get(op, 1.0) / weight for op in ops})
    if budget_s is None:
        for nbytes in later:
            measure(nbytes, 0.0, {op: 1.0 for op in ops})
        return run
    first_times = {op: run.times[op][0] for op in ops}
    left = budget_s - run.clock.spent_s
    kept, run.cuts = plan_sizes(first, first_times, later, left, it, scope, n)
    for i, nbytes in enumerate(kept):
        rest = sum(cost_s(first, first_times, s, it) for s in kept[i:]) or 1.0
        share = (budget_s - run.clock.spent_s) * cost_s(first, first_times, nbytes, it) / rest
        measure(nbytes, share, {op: cost_s(first, {op: first_times[op]}, nbytes, it) for op in ops})
    return run


def pair_size(planned: int, floor: int, busbw: float, it: Iterations, round_s: float) -> tuple[int, Cut | None]:
    """The pairs' message: the planned size, or the largest of it halved down to ``floor`` whose runs
    (warm-up and the minimum) fit one round's budget at ``busbw`` (the whole world's all-gather bus
    bandwidth, bytes/s: a pair's link is no slower than the world's slowest). Never under ``floor``: the
    verdict needs the pairs, so at the floor they run whatever it costs. All pairs of all rounds use one
    size, so that their figures compare."""
    def predicted(nbytes: int) -> float:
        return (it.warmup + it.min_timed) * nbytes * bus_factor("all_gather", 2) / busbw if busbw > 0 else 0.0

    choice = next((s for s in smaller_sizes(planned, floor - 1) if predicted(s) <= round_s), floor)
    if choice == planned:
        return planned, None
    return choice, Cut("pairs", planned, choice, busbw, predicted(planned), round_s)
