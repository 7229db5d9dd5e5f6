"""The monitor shows a resume's check: its badge on the summary line and, when it differs, what differs on
the why-line."""

from __future__ import annotations

from launcher.events import MetricsRecorded, RunState, RunStateChanged
from tests.support.tui import FedEvents, wait_for
from trainer.wire.protocol import MetricRecord, ResumeCheck
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen


async def test_the_monitor_shows_the_resume_badge_and_what_differs(home):
    run = FedEvents()
    app = FsdpTuiApp(home)
    async with app.run_test(size=(150, 45)) as pilot:
        monitor = RunMonitorScreen("run-res", 1, events=run)
        await app.push_screen(monitor)

        def summary() -> str:
            return str(monitor.query_one("#summary").render())

        def why() -> str:
            return str(monitor.query_one("#why").render()) if monitor.query_one("#why").has_class("-shown") else ""

        run.put(RunStateChanged("run-res", RunState.RUNNING, 2))
        run.put(MetricsRecorded("run-res", MetricRecord(step=7, max_steps=10, loss=2.0, time=1.0)))
        await wait_for(pilot, lambda: "step 7/10" in summary())
        assert "resume" not in summary() and why() == ""
        check = ResumeCheck("differs", 6, from_step=6, differs=("seed: 42 in the checkpoint, 7 now",))
        run.put(MetricsRecorded("run-res", check.record()))
        await wait_for(pilot, lambda: "RUNNING  attempt 2  resume DIFFERS  elapsed" in summary())
        await wait_for(pilot, lambda: why() == "resume differs: seed: 42 in the checkpoint, 7 now")
        run.put(MetricsRecorded("run-res", ResumeCheck("resharded", 6, from_step=6).record()))
        await wait_for(pilot, lambda: "resume RESHARDED" in summary() and why() == "")
