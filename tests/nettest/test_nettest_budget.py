"""``--quick``'s time budget against a fake network and a fake clock (the sum of the agreed iteration
times, as on the nodes): how many iterations run, which sizes are cut or skipped and what the report
says, and that the verdict holds with the fewer samples."""

from __future__ import annotations

import statistics

import pytest

from launcher.nettest.figures import PairFigure, decode, judge_pairs
from launcher.nettest.report import cut_lines, to_dict
from tests.support.nettest import noise
from trainer.wire.nettest_budget import (
    QUICK,
    Clock,
    Cut,
    Iterations,
    bus_factor,
    keep_timing,
    measure_scope,
    pair_size,
    plan_sizes,
    timed_runs,
)
from trainer.wire.nettest_pairs import pair_figure, run_rounds

MIB = 1 << 20
OPS = ("all_gather", "reduce_scatter", "all_reduce")
IT = Iterations(warmup=1, min_timed=2, max_timed=5)


@pytest.mark.parametrize(("times", "spent", "until", "more"), [
    ([], 9.0, 1.0, True),              # below the minimum: on, whatever the budget
    ([0.5], 9.0, 1.0, True),
    ([0.1, 0.1], 0.5, 1.0, True),      # room for one more
    ([0.1, 0.3], 0.85, 1.0, False),    # one more (the median, 0.2) would end past the budget
    ([0.1, 0.1, 0.1, 0.1, 0.1], 0.0, 9.0, False),  # the maximum
])
def test_iterations_go_on_to_the_minimum_then_while_the_next_fits(times, spent, until, more):
    assert keep_timing(times, Clock(spent), until, IT) is more


def fake_run(seconds: list[float] | float):
    """A collective that takes these agreed seconds, one per run (or always the same)."""
    queue = list(seconds) if isinstance(seconds, list) else None

    def run_once() -> float:
        return queue.pop(0) if queue is not None else seconds

    return run_once


@pytest.mark.parametrize(("each_s", "until", "timed", "spent"), [
    (0.01, 1.0, 5, 0.06),   # a fast link: the maximum, far within the budget
    (0.2, 0.9, 3, 0.8),     # warm-up 0.2, then three of 0.2: a fourth would end at 1.0, past 0.9
    (2.0, 1.0, 2, 6.0),     # a slow link: the minimum, the budget overrun and said by the clock
])
def test_timed_runs_stop_when_the_budget_is_spent_never_under_the_minimum(each_s, until, timed, spent):
    clock = Clock()
    times = timed_runs(fake_run(each_s), IT, clock, until)
    assert len(times) == timed
    assert clock.spent_s == pytest.approx(spent)


def network(busbw: float, latency_s: float = 0.0):
    """``run_for`` of a scope on an even network: a collective of ``nbytes`` on ``n`` ranks takes what its
    bus bandwidth says (nccl-tests' definition turned around) plus a latency."""
    asked: list[tuple[str, int]] = []

    def for_n(n: int):
        def run_for(op: str, nbytes: int):
            asked.append((op, nbytes))
            return fake_run(latency_s + nbytes * bus_factor(op, n) / busbw)
        return run_for

    return for_n, asked


@pytest.mark.parametrize(("busbw", "n", "sizes", "kept", "cut"), [
    # fast links (unshaped veth, ~400 MB/s): both sizes, nothing cut
    (400e6, 16, [MIB, 16 * MIB], [MIB, 16 * MIB], []),
    # 200 Mbit links (25 MB/s) on 16 nodes: 16 MiB would take ~8 s, cut to what fits
    (25e6, 16, [MIB, 16 * MIB], [MIB, 4 * MIB], [(16 * MIB, 4 * MIB)]),
    # 10 Mbit: even 2 MiB does not fit, skipped
    (1.2e6, 16, [MIB, 16 * MIB], [MIB], [(16 * MIB, 0)]),
    # three sizes on a middling link: the largest is cut first, the middle one kept
    (100e6, 8, [MIB, 4 * MIB, 64 * MIB], [MIB, 4 * MIB, 16 * MIB], [(64 * MIB, 16 * MIB)]),
])
def test_a_scope_keeps_its_budget_by_cutting_the_large_size(busbw, n, sizes, kept, cut):
    for_n, asked = network(busbw)
    run = measure_scope(sizes, OPS, for_n(n), IT, QUICK.world_s, "world", n)
    assert run.sizes == kept
    assert [(c.size, c.kept) for c in run.cuts] == cut
    # within the budget, but for the minimum of iterations that a size always gets
    floor = sum((IT.warmup + IT.min_timed) * s * bus_factor(op, n) / busbw for s in kept[:1] for op in OPS)
    assert run.clock.spent_s <= max(QUICK.world_s, floor) * 1.001
    for op in OPS:
        assert [len(t) for t in run.times[op]] and all(IT.min_timed <= len(t) <= IT.max_timed
                                                        for t in run.times[op])
    for c in run.cuts:  # the estimate is the first size's all-gather bus bandwidth: the fake's own
        assert c.busbw == pytest.approx(busbw)
        assert c.predicted_s == pytest.approx((IT.warmup + IT.min_timed) * c.size / busbw
                                              * sum(bus_factor(op, n) for op in OPS))
    assert {nbytes for _op, nbytes in asked} == set(kept)


def test_without_a_budget_every_size_runs_its_fixed_count():
    for_n, _asked = network(1e6)  # slow: it does not matter
    fixed = Iterations(2, 10, 10)
    run = measure_scope([MIB, 4 * MIB, 16 * MIB], OPS, for_n(4), fixed, None, "world", 4)
    assert run.sizes == [MIB, 4 * MIB, 16 * MIB] and run.cuts == []
    assert all(len(t) == 10 for op in OPS for t in run.times[op])


def test_latency_makes_the_estimate_pessimistic_never_optimistic():
    """At 1 MiB a link's latency weighs more than at 16 MiB: scaling the 1 MiB time up over-predicts,
    so a size that is kept fits."""
    for_n, _asked = network(25e6, latency_s=0.02)
    run = measure_scope([MIB, 16 * MIB], OPS, for_n(16), IT, QUICK.world_s, "world", 16)
    assert run.sizes == [MIB, 2 * MIB] and run.clock.spent_s <= QUICK.world_s


@pytest.mark.parametrize(("busbw", "planned", "chosen"), [
    (400e6, 16 * MIB, 16 * MIB),   # fast: as planned
    (25e6, 16 * MIB, 8 * MIB),     # 200 Mbit: 16 MiB x 0.5 / 25 MB/s x 4 runs = 1.3 s > 0.75 s; 8 MiB 0.67 s
    (0.5e6, 16 * MIB, MIB),        # very slow: never under the first size, the pairs are needed
    (0.0, 16 * MIB, 16 * MIB),     # nothing to judge by: as planned
])
def test_the_pairs_message_fits_a_round(busbw, planned, chosen):
    got, cut = pair_size(planned, MIB, busbw, QUICK.pairs, QUICK.pair_round_s)
    assert got == chosen and (cut is None) == (chosen == planned)
    if cut:
        assert (cut.scope, cut.size, cut.kept) == ("pairs", planned, chosen)


def test_plan_sizes_says_what_the_skipped_size_would_cost():
    first = {op: [0.04, 0.04] for op in OPS}  # 1 MiB in 40 ms each
    kept, cuts = plan_sizes(MIB, first, [16 * MIB], 0.5, IT, "world", 2)  # 2 MiB would take 0.72 s
    assert kept == [] and len(cuts) == 1
    c = cuts[0]
    assert (c.size, c.kept) == (16 * MIB, 0)
    assert c.predicted_s == pytest.approx(3 * 3 * 0.04 * 16)
    assert c.busbw == pytest.approx(MIB / 0.04 * 0.5)


def pair_network(slow: set[int], starved: int | None, hit: set[int]):
    """``measure`` for ``run_rounds`` whose pairs run through :func:`timed_runs` within the quick budget and
    are judged as on the nodes (:func:`pair_figure`); in every pair of node ``starved`` (a node whose
    process waited for a core) the runs numbered in ``hit`` (0: the warm-up) take 4x as long. The runs'
    times are kept, by round and pair."""
    fast, slow_bw = 25e6, 5e6
    nbytes = 8 * MIB
    kept: dict[tuple[int, int, int], list[float]] = {}

    def measure(rnd, stage, pairs):
        out = {}
        for a, b in pairs:
            bw = min(slow_bw if a in slow else fast, slow_bw if b in slow else fast) * noise(a, b)
            each = nbytes * 0.5 / bw
            seconds = [each * (4 if starved in (a, b) and i in hit else 1)
                       for i in range(QUICK.pairs.warmup + QUICK.pairs.max_timed)]
            kept[(rnd, a, b)] = timed_runs(fake_run(seconds), QUICK.pairs, Clock(), QUICK.pair_round_s)
            out[(a, b)] = pair_figure(nbytes, kept[(rnd, a, b)])
        return out

    return measure, kept, nbytes


def pair_verdicts(nnodes: int, slow: set[int], starved: int | None, hit: set[int]):
    """The verdict as the test gives it (each pair's fastest run), and as the runs' medians would give it."""
    measure, kept, nbytes = pair_network(slow, starved, hit)
    done = run_rounds(nnodes, measure)
    best = [PairFigure(a, b, r, nbytes, statistics.median(kept[(r, a, b)]), s, min(kept[(r, a, b)]))
            for r, a, b, s in done]
    median = [PairFigure(a, b, r, nbytes, statistics.median(kept[(r, a, b)]), s) for r, a, b, s in done]
    return judge_pairs(best), judge_pairs(median)


@pytest.mark.parametrize(("nnodes", "slow", "starved", "hit", "named"), [
    (16, set(), 5, {1}, []),            # one run of each of node 5's pairs disturbed: an even network names none
    (16, set(), 5, {2, 3}, []),         # two of the three timed runs at least
    (3, set(), 0, {1, 2}, []),
    (16, {7}, None, set(), [7]),        # a slow node is named: every run of its pairs is slow
    (16, {7}, 3, {1, 2}, [7]),
    (3, {2}, None, set(), [2]),
])
def test_the_verdict_holds_with_the_budgets_fewer_samples(nnodes, slow, starved, hit, named):
    verdict, _by_median = pair_verdicts(nnodes, slow, starved, hit)
    assert list(verdict.slow_nodes) == named and [f.kind for f in verdict.findings] == ["node"] * len(named)


def test_why_a_pair_is_judged_by_its_fastest_run():
    """Node 5's process waits for a core in most runs (as on 16 hosts sharing 2 cores): the runs' median
    would name it; its fastest run shows its link is as fast as the others."""
    verdict, by_median = pair_verdicts(16, set(), 5, {1, 2})
    assert by_median.slow_nodes == (5,)
    assert verdict.findings == ()


def test_a_cut_is_decoded_and_said_in_the_report():
    from tests.support.nettest import result

    raw = result(nnodes=3, local=1, size=MIB)
    raw["sizes"] = [MIB, 16 * MIB]
    raw["scopes"][0]["sizes"] = [MIB]  # 16 MiB skipped in the whole world
    raw["cuts"] = [Cut("world", 16 * MIB, 0, 25e6, 9.1, 2.3).to_dict(),
                   Cut("pairs", 16 * MIB, 8 * MIB, 25e6, 1.34, 1.0).to_dict()]
    m = decode(raw)
    assert [f.nbytes for f in m.scope("world").figures] == [MIB] * 3
    lines = cut_lines(m, ("a", "b", "c"))
    assert lines == ["whole world: 16 MiB skipped: at 25.0 MB/s it would take 9.1 s, over the 2.3 s left of the "
                     "phase's budget",
                     "pairs of nodes: 16 MiB cut to 8 MiB: at 25.0 MB/s it would take 1.3 s, over a round's "
                     "budget of 1.00 s"]
    assert [c["text"] for c in to_dict(m, ("a", "b", "c"))["cuts"]] == lines
    assert cut_lines(decode(result()), ("a", "b", "c")) == []  # an older result: no cuts, its own sizes
