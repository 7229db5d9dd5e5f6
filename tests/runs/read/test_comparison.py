"""Comparison numbers from recorded runs, and their export: the CSV holds exactly what the records say."""

from __future__ import annotations

import csv
import io
import json
import statistics

import pytest

from launcher.present.comparison import exported, render
from launcher.runs.read.comparison import compare_runs, stats_from_records, sweep_stats, with_scaling
from launcher.runs.sweeps.record import find_sweep, list_sweeps, load_sweep
from tests.support.cli import cli
from tests.support.recorded_sweep import SWEEP_ID, VARIANTS, metrics, record_sweep, run_id
from trainer.wire.protocol import MetricRecord


def test_stats_from_records_reads_speed_memory_and_losses():
    records = [MetricRecord.from_dict(m) for m in metrics(1000.0, (0.5, 0.4), 0.0)]
    s = stats_from_records("r", "x", "succeeded", records, world_size=2)
    tps = [r.tokens_per_s for r in records if r.kind == "train"][1:]
    assert s.tokens_per_s == pytest.approx(statistics.fmean(tps))
    assert s.step_time_s == pytest.approx(0.5)
    assert s.peak_gib == pytest.approx(0.5) and s.peak_spread_gib == pytest.approx(0.1)
    assert s.final_loss == records[-2].loss and s.best_loss == min(r.loss for r in records if r.loss)
    assert s.eval_loss == 2.0 and len(s.losses) == 12


def test_scaling_is_against_the_fewest_processes():
    a = stats_from_records("a", "", "succeeded", [], world_size=2)
    rows = with_scaling([a.__class__(**{**a.__dict__, "tokens_per_s": 100.0}),
                         a.__class__(**{**a.__dict__, "run_id": "b", "world_size": 4, "tokens_per_s": 150.0})])
    assert rows[1].speedup == pytest.approx(1.5) and rows[1].efficiency == pytest.approx(0.75)


@pytest.mark.parametrize(("sizes", "scaled"), [
    ((1, 2, 4), True),  # a scaling series
    ((2, 2, 2, 2, 4), False),  # strategies on 2 processes, one variant on 4: not scaling
    ((2, 2), False),  # nothing changes size
    ((2, 4, 4), False),  # two runs at one size: which one scaled?
])
def test_speedup_only_for_a_scaling_series(sizes, scaled):
    a = stats_from_records("a", "", "succeeded", [], world_size=1)
    rows = with_scaling([a.__class__(**{**a.__dict__, "run_id": str(i), "world_size": n, "tokens_per_s": 100.0 + i})
                         for i, n in enumerate(sizes)])
    assert all((r.speedup is not None and r.efficiency is not None) == scaled for r in rows)


def test_sweep_rows_csv_json_and_md_equal_the_records(home):
    sweep = record_sweep(home)
    rows = sweep_stats(home, sweep)
    assert [r.state for r in rows] == ["succeeded", "succeeded", "succeeded", "failed", "skipped"]
    assert rows[3].signature.startswith("node 0 rank 1: ValueError")
    assert rows[2].peak_gib > rows[0].peak_gib  # no_shard holds more per rank than full_shard
    parsed = list(csv.DictReader(io.StringIO(render(rows, "csv"))))
    for row, stats in zip(parsed, rows, strict=True):
        for key, value in exported(stats).items():
            assert row[key] == ("" if value is None else str(value)), key
    as_json = json.loads(render(rows, "json"))
    assert as_json[0]["tokens_per_s"] == rows[0].tokens_per_s and len(as_json[0]["losses"]) == 12
    md = render(rows, "md").splitlines()
    assert md[0].startswith("| run | variant | state |") and len(md) == 2 + len(VARIANTS)


def test_sweep_records_are_listed_and_found(home):
    record_sweep(home)
    assert [s.sweep_id for s in list_sweeps(home)] == [SWEEP_ID]
    assert find_sweep(home, "5a5a") == SWEEP_ID
    assert load_sweep(home, SWEEP_ID).variant(run_id(3)).label == "sharding=no_shard"
    with pytest.raises(LookupError):
        find_sweep(home, "nope")


def test_cli_sweeps_show_and_compare(home):
    record_sweep(home)
    listed = json.loads(cli(home, "sweeps", "--json").stdout)
    assert listed[0]["sweep_id"] == SWEEP_ID and len(listed[0]["variants"]) == 5
    shown = cli(home, "sweep", "show", "5a5a", "--format", "csv")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == render(sweep_stats(home, load_sweep(home, SWEEP_ID)), "csv")
    table = cli(home, "sweep", "show", SWEEP_ID).stdout
    assert "sharding=no_shard" in table and "ValueError" in table
    compared = cli(home, "compare", run_id(1), run_id(3), "--format", "md")
    assert compared.returncode == 0, compared.stderr
    assert compared.stdout == render(compare_runs(home, [run_id(1), run_id(3)]), "md")
