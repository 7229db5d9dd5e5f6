"""The monitor shows a swap of a failed node: the summary line's badge, the line under it, the node's host
in its pane and a toast, as the run's events say it (fed here as the run's owner writes them)."""

from __future__ import annotations

from launcher.events import NodeState, NodeStateChanged, NodeSwapped, RunState, RunStateChanged
from launcher.runs.core.swaps import Swap, settled
from tests.support.tui import FedEvents, wait_for
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen

SWAP = Swap(number=1, kind="spare", node_rank=1, failed_host="gpu-07", why="node 1 (gpu-07): lost", signature="lost",
            failed_at=1000.0, attempt=2, failed_step=1840, replacement="gpu-11", checkpoint_step=1800,
            hosts_after=("gpu-01", "gpu-11"))


async def test_the_monitor_says_a_swap_until_its_resume_is_proved(home):
    run = FedEvents()
    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 45)) as pilot:
        monitor = RunMonitorScreen("run-swap", 2, events=run)
        await app.push_screen(monitor)

        def summary() -> str:
            return str(monitor.query_one("#summary").render())

        def why() -> str:
            return str(monitor.query_one("#why").render()) if monitor.query_one("#why").has_class("-shown") else ""

        run.put(RunStateChanged("run-swap", RunState.RUNNING, 1))
        for rank, host in enumerate(("gpu-01", "gpu-07")):
            run.put(NodeStateChanged("run-swap", rank, host, NodeState.RUNNING))
        await wait_for(pilot, lambda: "RUNNING  attempt 1" in summary())
        run.put(RunStateChanged("run-swap", RunState.RETRYING, 2, "attempt 2 on other nodes"))
        run.put(NodeSwapped("run-swap", SWAP))
        run.put(NodeStateChanged("run-swap", 1, "gpu-11", NodeState.RUNNING))
        run.put(RunStateChanged("run-swap", RunState.RUNNING, 2))
        await wait_for(pilot, lambda: "RECOVERING node 1" in summary())
        assert why() == "recovering: node 1 (gpu-07) lost at step 1,840; replaced by gpu-11; resuming from step 1,800"
        assert "gpu-11" in str(monitor.pane(1).border_title)
        run.put(NodeSwapped("run-swap", settled(SWAP, 1094.0, 1801, "verified")))
        await wait_for(pilot, lambda: "1 swap VERIFIED" in summary())
        assert why() == ("recovered: node 1 (gpu-07) lost at step 1,840; replaced by gpu-11; resumed verified at "
                         "step 1,800 after 94 s")
        toasts = [str(n.message) for n in app._notifications]
        assert any(t.startswith("recovered: node 1 (gpu-07) lost") for t in toasts), toasts
