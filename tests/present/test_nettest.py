"""An interconnect test as only the front ends say it: its headline, its pairs as lines and as bars."""

from __future__ import annotations

import pytest

from launcher.nettest.figures import Measured, PairFigure, decode
from launcher.present.nettest import headline, pair_bars, pair_lines
from tests.support.nettest import result


def test_the_headline_says_the_world_and_its_all_gather_at_the_largest_size():
    assert headline(decode(result())) == (
        "3 nodes x 1 process, gloo on cpu; whole world all-gather 28.0 MB/s bus bandwidth at 4 MiB")
    assert headline(decode(result(nnodes=2, local=4))).startswith("2 nodes x 4 processes, gloo on cpu; ")


def test_pair_lines_name_both_nodes_with_their_hosts_where_known():
    assert pair_lines(decode(result()), ("a", "b")) == [
        "round 1: node 0 (a) - node 1 (b): 21.0 MB/s (4 MiB all-gather, fastest of 3 runs 100.0 ms, median 100.0 ms)",
        "round 2: node 1 (b) - node 2: 4.2 MB/s (4 MiB all-gather, fastest of 3 runs 500.0 ms, median 500.0 ms)",
        "round 3: node 0 (a) - node 2: 4.2 MB/s (4 MiB all-gather, fastest of 3 runs 500.0 ms, median 500.0 ms)"]


def test_one_bar_per_pair_the_figure_the_verdict_counts():
    nbytes = 1_000_000
    pairs = [PairFigure(0, 1, 0, nbytes, 0.01), PairFigure(1, 2, 1, nbytes, 0.1),
             PairFigure(0, 2, 2, nbytes, 0.01, "tournament"), PairFigure(1, 2, 3, nbytes, 0.02, "tournament")]
    m = Measured("gloo", "cpu", 3, 3, 1, (nbytes,), 3, (), tuple(pairs), {})
    assert pair_bars(m) == [("0-1", pytest.approx(50e6)), ("1-2 (best of 2)", pytest.approx(25e6)),
                            ("0-2", pytest.approx(50e6))]
