"""The monitor shows the run's memory prediction above its gauges once the trainer said one, beside the
highest peak its ranks have measured; nothing (no line at all) for a run that predicted nothing."""

from __future__ import annotations

from launcher.events import MetricsRecorded, RunState, RunStateChanged
from tests.support.tui import FedEvents, wait_for
from trainer.wire.fit_record import FitSummary
from trainer.wire.protocol import MetricRecord, RankMemory
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen


async def test_the_monitor_puts_the_measured_peak_beside_the_prediction(home):
    run = FedEvents()
    app = FsdpTuiApp(home)
    async with app.run_test(size=(150, 45)) as pilot:
        monitor = RunMonitorScreen("run-mem", 1, events=run)
        await app.push_screen(monitor)
        line = monitor.query_one("#fit")

        run.put(RunStateChanged("run-mem", RunState.RUNNING, 1))
        run.put(MetricsRecorded("run-mem", MetricRecord(step=1, max_steps=10, loss=2.0, time=1.0,
                                                        memory=(RankMemory(0, rss_gib=0.5, peak_rss_gib=0.55),))))
        await wait_for(pilot, lambda: "step 1/10" in str(monitor.query_one("#summary").render()))
        assert not line.has_class("-known") and line.display is False  # nothing predicted: no line
        fit = FitSummary(expected_gib=0.62, need_gib=0.62, device="cpu", sharding="full_shard", world=2, memory_gib=11.8)
        run.put(MetricsRecorded("run-mem", fit.record()))
        run.put(MetricsRecorded("run-mem", MetricRecord(step=2, max_steps=10, loss=1.9, time=2.0, memory=(
            RankMemory(0, rss_gib=0.5, peak_rss_gib=0.6), RankMemory(1, rss_gib=0.6, peak_rss_gib=0.71)))))
        await wait_for(pilot, lambda: line.has_class("-known"))
        await wait_for(pilot, lambda: "peak 0.71 GiB (rank 1 of 2) against 0.62 GiB predicted (+15%" in str(line.render()))
        assert line.display is True
