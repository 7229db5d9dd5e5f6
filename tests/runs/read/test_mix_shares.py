"""A mixture's shares as the launcher shows them: the monitor's view and ``show`` say each source's
realised share of the rows trained on so far beside what its weight asks (from the trainer's ``data``
record and the newest step's ``mix_rows``); a run of one source says nothing of a mix, and a node's
malformed figures are dropped, never trusted."""

from __future__ import annotations

import json

from launcher.events import MetricsRecorded, RunState
from launcher.runs.read.view import RunView
from tests.support.tui import RecordedRun, record
from trainer.wire.protocol import DataSummary, MetricRecord, SourceSummary

SUMMARY = DataSummary(examples=3000, eval_examples=40, format="mixed", max_seq_len=64, truncated=0,
                      truncated_tokens=0, sources=(SourceSummary("alpaca.jsonl", "alpaca", 2000, 900, 0.75),
                                                   SourceSummary("numbers", "text", 1000, 300, 0.25)))


def _train(step: int, rows) -> dict:
    return {"step": step, "kind": "train", "max_steps": 12, "loss": 3.0, "mix_rows": rows}


def test_the_monitors_view_says_each_sources_share_beside_its_weight():
    view = RunView("r")
    assert view.mix_words() == ""
    view.apply(MetricsRecorded("r", SUMMARY.record()), now=1.0)
    assert view.mix_words() == "alpaca.jsonl (75%), numbers (25%)"  # before the first step: the weights
    for step, rows in ((1, [6, 2]), (2, [11, 5]), (3, "junk"), (4, [-1, 3])):
        view.apply(MetricsRecorded("r", MetricRecord.from_dict(_train(step, rows))), now=2.0)
    assert view.mix_words() == "alpaca.jsonl 68.8% (75%), numbers 31.2% (25%)"  # the malformed ones dropped
    one = RunView("s")
    one.apply(MetricsRecorded("s", DataSummary(10, 0, "alpaca", 64, 0, 0).record()), now=1.0)
    one.apply(MetricsRecorded("s", MetricRecord.from_dict({"step": 1, "kind": "train", "loss": 1.0})), now=2.0)
    assert one.mix_words() == ""


def test_show_prints_the_realised_shares(home, monkeypatch, capsys):
    from launcher.cli.main import main

    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    run = RecordedRun("20260301-0900-mix-a1f3", "mix", RunState.SUCCEEDED, 1, 0, 60, 3.0, None, 12, 12)
    metrics = [json.loads(SUMMARY.record().to_json()), _train(1, [6, 2]), _train(12, [72, 24])]
    record(home, run, metrics=metrics)
    assert main(["show", run.run_id]) == 0
    shown = capsys.readouterr().out
    assert "  data      3000 examples + 40 held out (mixed), none cut at max_seq_len 64\n" in shown
    assert ("  mix       alpaca.jsonl 75.0% (75%), numbers 25.0% (25%)  (rows trained on so far, and what the "
            "weights ask)\n") in shown
    assert main(["show", run.run_id, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["mix_rows"] == [72, 24] and [s["name"] for s in data["sources"]] == ["alpaca.jsonl", "numbers"]
