"""The monitor shows a mixture's shares under its figures: each source's realised share of the rows trained
on so far beside its weight's, updated as steps come; a run of one source shows no such line."""

from __future__ import annotations

from launcher.events import MetricsRecorded, RunState, RunStateChanged
from tests.support.tui import FedEvents, wait_for
from trainer.wire.protocol import DataSummary, MetricRecord, SourceSummary
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen

SUMMARY = DataSummary(examples=3000, eval_examples=40, format="mixed", max_seq_len=64, truncated=0,
                      truncated_tokens=0, sources=(SourceSummary("alpaca.jsonl", "alpaca", 2000, 900, 0.75),
                                                   SourceSummary("numbers", "text", 1000, 300, 0.25)))


async def test_the_monitor_shows_a_mixtures_shares_as_steps_come(home):
    run = FedEvents()
    app = FsdpTuiApp(home)
    async with app.run_test(size=(150, 45)) as pilot:
        monitor = RunMonitorScreen("run-mix", 1, events=run)
        await app.push_screen(monitor)
        line = monitor.query_one("#mix")
        run.put(RunStateChanged("run-mix", RunState.RUNNING, 1))
        run.put(MetricsRecorded("run-mix", MetricRecord(step=1, max_steps=10, loss=2.0, time=1.0)))
        await wait_for(pilot, lambda: monitor.view.step == 1)
        assert not line.has_class("-shown") and not line.display  # one source: nothing to say
        run.put(MetricsRecorded("run-mix", SUMMARY.record()))
        run.put(MetricsRecorded("run-mix", MetricRecord(step=2, max_steps=10, loss=2.0, time=2.0,
                                                        extra={"mix_rows": [11, 5]})))
        await wait_for(pilot, lambda: str(line.render()) == "mix: alpaca.jsonl 68.8% (75%), numbers 31.2% (25%)")
        assert line.display
        run.put(MetricsRecorded("run-mix", MetricRecord(step=3, max_steps=10, loss=2.0, time=3.0,
                                                        extra={"mix_rows": [18, 6]})))
        await wait_for(pilot, lambda: str(line.render()) == "mix: alpaca.jsonl 75.0% (75%), numbers 25.0% (25%)")
