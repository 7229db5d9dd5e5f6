"""The slow-rank flag, table-driven on made-up per-rank step times, and the wire format that carries them."""

from __future__ import annotations

import json
import random

import pytest

from launcher.runs.read.ranks import WINDOW_STEPS, RankTimes, rank_report
from trainer.wire.protocol import MetricRecord


def records(steps, world=8, base=0.010, slow=None, noise=0.05, every=1, seed=7):
    """Train records at steps every..steps; ``slow`` maps rank -> (factor, steps it applies to)."""
    rng = random.Random(seed)
    out = []
    for step in range(every, steps + 1, every):
        times = []
        for rank in range(world):
            value = base * (1 + rng.uniform(-noise, noise))
            factor, when = (slow or {}).get(rank, (1.0, ()))
            if step in when:
                value *= factor
            times.append(value)
        out.append(MetricRecord(step=step, loss=1.0, rank_step_s=tuple(times)))
    return out


ALL = range(0, 1000)

CASES = [
    # (name, records, num_nodes, flagged ranks, words in the first flag)
    ("even run", records(40), 2, [], None),
    ("even run, noisier (+-12%)", records(60, noise=0.12), 2, [], None),
    ("one chronically slow rank", records(40, slow={5: (1.4, ALL)}), 2, [5], "rank 5 on node 1 +"),
    ("a slow node of four: its two ranks", records(40, slow={r: (1.3, ALL) for r in (6, 7)}), 4,
     [6, 7], "on node 3 +"),
    ("one noisy step is not a slow rank", records(40, slow={3: (4.0, {30})}), 2, [], None),
    ("a few noisy steps are not a slow rank", records(40, slow={3: (3.0, {22, 27, 33, 38})}), 2, [], None),
    ("slow only in the window's first half", records(40, slow={2: (1.5, range(21, 31))}), 2, [], None),
    ("slow before the window, well now", records(60, slow={2: (1.5, range(1, 30))}), 2, [], None),
    ("too early to say", records(WINDOW_STEPS - 5, slow={1: (2.0, ALL)}), 2, [], None),
    ("just below the threshold", records(40, slow={1: (1.12, ALL)}, noise=0.0), 2, [], None),
    ("microseconds of difference", records(40, base=0.00005, slow={1: (2.0, ALL)}), 2, [], None),
    ("records every 5 steps", records(40, every=5, slow={6: (1.5, ALL)}), 2, [6], "over 20 steps"),
    ("nodes unknown: rank only", records(40, slow={6: (1.5, ALL)}), None, [6], "rank 6 +"),
    ("ranks not a multiple of nodes", records(40, world=6, slow={0: (1.5, ALL)}), 4, [0], "rank 0 +"),
]


@pytest.mark.parametrize(("name", "recs", "num_nodes", "flagged", "words"), CASES, ids=[c[0] for c in CASES])
def test_slow_rank_flag(name, recs, num_nodes, flagged, words):
    report = rank_report(recs, num_nodes)
    assert sorted(s.rank for s in report.slow) == flagged
    assert [r.rank for r in report.rows if r.slow] == flagged
    if words:
        assert words in report.slow[0].says
        assert report.says.startswith(report.slow[0].says)
    else:
        assert "no slow rank" in report.says


def test_the_words_of_a_flag():
    recs = records(40, world=16, slow={11: (1.18, ALL)}, noise=0.0)
    (slow,) = rank_report(recs, 4).slow
    assert slow.says.startswith("rank 11 on node 2 +18% over 20 steps (11.8 ms a step of its own work, median rank 10.0 ms)")
    assert slow.to_dict()["node"] == 2 and slow.to_dict()["excess"] == pytest.approx(0.18)


def test_a_new_attempt_starts_afresh_and_the_history_is_bounded():
    times = RankTimes(2)
    for r in records(40, slow={5: (1.5, ALL)}):
        times.add(r)
    assert [s.rank for s in times.report().slow] == [5]
    for r in records(10):  # steps start again at 1: the retried attempt's times only
        times.add(r)
    assert times.report().slow == () and times.report().window_steps == 10
    for r in records(1000):
        times.add(r)
    assert len(times.records) <= times.records.maxlen


def test_the_heatmap_rows_and_what_is_left_out():
    recs = records(30, world=4, slow={3: (2.0, ALL)}, noise=0.0)
    recs.append(MetricRecord(step=31, kind="eval", eval_loss=1.0))
    recs.append(MetricRecord(step=31, loss=1.0))  # a record without per-rank times
    report = rank_report(recs, 2)
    assert report.steps == tuple(range(19, 31))
    row = report.rows[3]
    assert row.node == 1 and row.slow and row.last_s == pytest.approx(0.02)
    assert report.node_step_s() == {0: pytest.approx(0.01), 1: pytest.approx(0.02)}
    assert all(x == pytest.approx(2.0) for x in row.ratios)  # twice the median rank's, at every step
    assert rank_report([MetricRecord(step=1, loss=1.0)], 2).says.startswith("no per-rank step times")


@pytest.mark.parametrize(("sent", "kept"), [
    ([0.1, 0.2], (0.1, 0.2)),
    ([1, None, -1, "x", True], (1.0, None, None, None, None)),
    ("0.1,0.2", ()),
    (None, ()),
])
def test_rank_step_s_on_the_wire(sent, kept):
    line = json.dumps({"step": 3, "loss": 1.0, **({"rank_step_s": sent} if sent is not None else {})})
    record = MetricRecord.from_json(line)
    assert record.rank_step_s == kept and "rank_step_s" not in record.extra


def test_rank_step_s_round_trips_and_old_records_still_read():
    record = MetricRecord(step=2, loss=1.5, rank_step_s=(0.01, float("nan"), 0.03))
    data = json.loads(record.to_json())
    assert data["rank_step_s"] == [0.01, None, 0.03]
    assert MetricRecord.from_dict(data).rank_step_s == (0.01, None, 0.03)
    assert "rank_step_s" not in json.loads(MetricRecord(step=2, loss=1.5).to_json())  # old readers see no new key
    assert MetricRecord.from_json('{"step": 1, "loss": 2.0}').rank_step_s == ()


def test_show_names_the_slow_rank_in_text_json_and_the_triage(home):
    from launcher.events import RunState
    from tests.support.cli import cli
    from tests.support.tui import RecordedRun, record

    run_id = "20260301-0900-slow-a1f3"
    metrics = [json.loads(r.to_json()) for r in records(30, world=4, slow={3: (1.5, ALL)})]
    directory = record(home, RecordedRun(run_id, "slow", RunState.FAILED, 2, 0, 60, 1.0, None, 30, 40),
                       metrics=metrics)
    (directory / "triage.json").write_text(json.dumps({"summary": "node 1 rank 3: python_error, exit code 1"}))
    text = cli(home, "show", run_id).stdout
    assert "  slow      rank 3 on node 1 +" in text and "over 20 steps" in text, text
    shown = json.loads(cli(home, "show", run_id, "--json").stdout)
    assert [s["rank"] for s in shown["ranks"]["slow"]] == [3] and shown["ranks"]["thresholds"]["window_steps"] == 20
    assert shown["triage"]["slow_ranks"][0].startswith("rank 3 on node 1 +")
