"""The pairs' rounds and the verdict against a fake network: every node has a speed, a pair runs at the
slower of its two nodes (times a slow link's factor) with a steady noise of up to +-25 %, and the test's
own planning (``trainer.wire.nettest_pairs.run_rounds``, what the nodes run) decides which pairs to measure."""

from __future__ import annotations

import pytest

from launcher.nettest.figures import PairFigure, judge_pairs
from launcher.nettest.report import to_dict, verdict_lines
from launcher.present.nettest import pair_lines
from tests.support.nettest import noise
from trainer.wire.nettest_pairs import (
    NEIGHBOUR_ROUNDS,
    TOURNAMENT_ROUNDS,
    run_rounds,
    standing,
    tournament_round,
)

FAST, SLOW = 100.0, 20.0  # MB/s: a slow node at 1/5, as the shaped real test


def fake_network(nnodes: int, slow: set[int] = frozenset(), links: dict[tuple[int, int], float] | None = None,
                 flaky: dict[tuple[int, int], float] | None = None):
    """``measure`` for ``run_rounds`` and the rounds it was asked for. ``flaky``: pairs slowed by that
    factor the first time only (a moment's noise)."""
    asked: list[tuple[int, str, list[tuple[int, int]]]] = []
    seen: set[tuple[int, int]] = set()

    def measure(rnd, stage, pairs):
        asked.append((rnd, stage, pairs))
        out = {}
        for a, b in pairs:
            blip = (flaky or {}).get((a, b), 1.0) if (a, b) not in seen else 1.0
            seen.add((a, b))
            out[(a, b)] = min(SLOW if a in slow else FAST, SLOW if b in slow else FAST) \
                * (links or {}).get((a, b), 1.0) * noise(a, b) * blip
        return out

    return measure, asked


def verdict_of(nnodes: int, slow: set[int] = frozenset(), links=None, flaky=None):
    measure, asked = fake_network(nnodes, slow, links, flaky)
    figures: dict[tuple[int, int, int], float] = {}

    def recording(rnd, stage, pairs):
        got = measure(rnd, stage, pairs)
        figures.update({(rnd, a, b): v for (a, b), v in got.items()})
        return got

    done = run_rounds(nnodes, recording)
    nbytes = 8_000_000
    pairs = [PairFigure(a, b, r, nbytes, nbytes * 0.5 / (figures[(r, a, b)] * 1e6), stage)
             for r, a, b, stage in done]
    return judge_pairs(pairs), done, asked, pairs


def alternate(n: int) -> set[int]:
    return set(range(1, n, 2))


@pytest.mark.parametrize(("nnodes", "slow", "links", "named", "named_links"), [
    # an even (noisy) network names nothing, at any size
    (3, set(), None, [], []),
    (4, set(), None, [], []),
    (16, set(), None, [], []),
    (64, set(), None, [], []),
    # one slow node
    (3, {2}, None, [2], []),
    (5, {3}, None, [3], []),
    (16, {7}, None, [7], []),
    (64, {40}, None, [40], []),
    # half the nodes slow alike, every other one: every neighbour pair is slow, the exploration round finds
    # the fast ones
    (4, alternate(4), None, [1, 3], []),
    (8, alternate(8), None, [1, 3, 5, 7], []),
    (16, alternate(16), None, sorted(alternate(16)), []),
    (64, alternate(64), None, sorted(alternate(64)), []),
    # half slow, side by side: the middle of the slow run meets a fast node in the tournament
    (16, set(range(8, 16)), None, list(range(8, 16)), []),
    (64, set(range(32)), None, list(range(32)), []),
    # three quarters slow: the fast quarter takes the suspects a round at a time
    (64, set(range(16, 64)), None, list(range(16, 64)), []),
    # one slow link between two fine nodes
    (4, set(), {(1, 2): 0.2}, [], [(1, 2)]),
    (16, set(), {(5, 6): 0.2}, [], [(5, 6)]),
    (64, set(), {(0, 63): 0.2}, [], [(0, 63)]),
    # a slow node and, elsewhere, a slow link
    (16, {3}, {(10, 11): 0.2}, [3], [(10, 11)]),
])
def test_the_slow_nodes_and_links_are_named_and_no_other(nnodes, slow, links, named, named_links):
    verdict, done, asked, _pairs = verdict_of(nnodes, slow, links)
    assert list(verdict.slow_nodes) == named
    assert [f.nodes for f in verdict.findings if f.kind == "link"] == named_links
    assert [f for f in verdict.findings if f.kind == "unconfirmed"] == []
    for rnd, _stage, pairs in asked:  # a round is parallel: no node in two of its pairs
        members = [n for p in pairs for n in p]
        assert len(members) == len(set(members)), rnd
    assert len(asked) <= NEIGHBOUR_ROUNDS + TOURNAMENT_ROUNDS
    twice = [p for p in {(a, b) for _r, a, b, _s in done} if [(a, b) for _r, a, b, _s in done].count(p) > 1]
    assert sorted(twice) == sorted(named_links)  # only a slow link is measured again, once


@pytest.mark.parametrize(("nnodes", "flaky"), [(4, {(1, 2): 0.2}), (16, {(5, 6): 0.1, (9, 10): 0.3})])
def test_a_link_slow_once_is_measured_again_and_not_named(nnodes, flaky):
    verdict, done, _asked, _pairs = verdict_of(nnodes, flaky=flaky)
    assert verdict.findings == ()
    again = [(a, b) for _r, a, b, stage in done if stage == "tournament" and (a, b) in flaky]
    assert sorted(again) == sorted(flaky)


@pytest.mark.parametrize(("nnodes", "rounds"), [(2, 1), (3, 3), (4, 3), (16, 3), (63, 4), (64, 3)])
def test_an_even_network_takes_the_neighbour_rounds_and_one_exploration_round(nnodes, rounds):
    _verdict, _done, asked, _pairs = verdict_of(nnodes)
    assert len(asked) == rounds
    assert [stage for _r, stage, _p in asked].count("tournament") == (1 if nnodes > 3 else 0)


def test_too_many_slow_for_the_rounds_leaves_them_unconfirmed_never_a_fast_node_named():
    """Four fast nodes of 64: the tournament's rounds end before every suspect met a fast node."""
    slow = set(range(4, 64))
    verdict, _done, asked, _pairs = verdict_of(64, slow)
    assert len(asked) == NEIGHBOUR_ROUNDS - 1 + TOURNAMENT_ROUNDS
    named = set(verdict.slow_nodes)
    unconfirmed = {n for f in verdict.findings if f.kind == "unconfirmed" for n in f.nodes}
    assert named and unconfirmed and named | unconfirmed == slow and not named & unconfirmed
    lines = verdict_lines(verdict, tuple(f"h{i}" for i in range(64)))
    assert any(line.startswith("unconfirmed: node ") and "test it with a node you trust" in line for line in lines)


def test_two_nodes_one_pair_nothing_to_compare():
    verdict, done, asked, _pairs = verdict_of(2, {1})
    assert done == [(0, 0, 1, "neighbours")] and len(asked) == 1
    assert verdict.findings == () and verdict.note.startswith("two nodes")


@pytest.mark.parametrize(("figures", "good", "slow", "open_", "links"), [
    ({}, [], [], [], []),
    ({(0, 1): 50, (1, 2): 50, (0, 2): 50}, [0, 1, 2], [], [], []),
    # node 2 slow against two fast nodes
    ({(0, 1): 50, (1, 2): 10, (0, 2): 10}, [0, 1], [2], [], []),
    # 3 and 4 only met each other and the slow 2 (never a fast node): open
    ({(0, 1): 50, (1, 2): 10, (2, 3): 10, (3, 4): 10}, [0, 1], [2], [3, 4], []),
    # one slow pair between fast nodes: a link
    ({(0, 1): 50, (1, 2): 8, (2, 3): 48, (0, 3): 52}, [0, 1, 2, 3], [], [], [(1, 2)]),
    # the reference is the fast pairs' median, not everyone's: three slow pairs of four do not drag it down
    ({(0, 1): 10, (1, 2): 10, (2, 3): 10, (0, 2): 60}, [0, 2], [1, 3], [], []),
])
def test_standing_classifies_nodes_from_the_pairs_so_far(figures, good, slow, open_, links):
    st = standing(figures)
    assert (sorted(st.good), sorted(st.slow), sorted(st.open), list(st.links)) == (good, slow, open_, links)


@pytest.mark.parametrize(("nnodes", "figures", "first", "twice", "planned"), [
    # nothing open, not the first round: nothing to learn
    (4, {(0, 1): 50, (1, 2): 50, (2, 3): 50, (0, 3): 50}, False, [], []),
    # the first round explores: each node with the nearest it has not met
    (4, {(0, 1): 50, (1, 2): 50, (2, 3): 50, (0, 3): 50}, True, [], [(0, 2), (1, 3)]),
    # three nodes have met each other: nothing to explore
    (3, {(0, 1): 50, (1, 2): 50, (0, 2): 50}, True, [], []),
    # open nodes meet fast nodes first, one each
    (6, {(0, 1): 50, (1, 2): 10, (2, 3): 10, (3, 4): 10, (4, 5): 10, (0, 5): 10}, False, [], [(0, 3), (1, 4)]),
    # a slow link between fast nodes is measured once more, and only once
    (4, {(0, 1): 50, (1, 2): 8, (2, 3): 48, (0, 3): 52}, False, [], [(1, 2)]),
    (4, {(0, 1): 50, (1, 2): 8, (2, 3): 48, (0, 3): 52}, False, [(1, 2)], []),
])
def test_a_tournament_round_pairs_suspects_with_fast_nodes(nnodes, figures, first, twice, planned):
    assert tournament_round(nnodes, figures, first, twice=frozenset(twice)) == planned


def test_the_report_marks_the_tournament_rounds():
    verdict, _done, _asked, pairs = verdict_of(8, alternate(8))
    from launcher.nettest.figures import Measured

    m = Measured("gloo", "cpu", 8, 8, 1, (8_000_000,), 3, (), tuple(pairs), {})
    lines = pair_lines(m, tuple(f"h{i}" for i in range(8)))
    assert lines[0].startswith("round 1: node 0 (h0) - node 1 (h1): ")
    assert any(line.startswith("round 3 (tournament): node 0 (h0) - node 2 (h2): ") for line in lines)
    data = to_dict(m, tuple(f"h{i}" for i in range(8)), verdict)
    assert {p["stage"] for p in data["pairs"]} == {"neighbours", "tournament"}
    assert [s["node"] for s in data["verdict"]["slow_nodes"]] == [1, 3, 5, 7]
