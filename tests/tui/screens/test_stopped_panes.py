"""A cancelled run's panes end with one line that says it was cancelled: torchrun's stop output (its
"death signal" and "closing signal" lines, the chained ``SignalException`` traceback, as a real cancel
printed it: tests/data/logs/torchrun_cancelled.txt) is folded away and counted; what a job prints of its
own while it stops, and an error that is not the stop's, are shown. The node's log keeps every line."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.events import NodeLines, RunFinished, RunState, RunStateChanged
from launcher.present.stop_output import StopOutput
from tests.support.tui import FedEvents, wait_for
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen

STOP = (Path(__file__).resolve().parents[2] / "data" / "logs" / "torchrun_cancelled.txt").read_text().splitlines()
ERROR = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
         "    open('missing.txt')", "FileNotFoundError: [Errno 2] No such file or directory: 'missing.txt'"]
WORKER = ["Traceback (most recent call last):", '  File "/opt/venv/lib/python3.11/site-packages/trainer/loop/steps.py", '
          "line 90, in run", "    loss.backward()", "KeyboardInterrupt"]


@pytest.mark.parametrize(("lines", "shown", "folded"), [
    (STOP, [], len(STOP)),
    (["saving a checkpoint at step 38 before stopping", *STOP], ["saving a checkpoint at step 38 before stopping"],
     len(STOP)),
    (ERROR, ERROR, 0),  # an error of its own: shown whole
    ([*WORKER, "", *STOP], [], len(WORKER) + 1 + len(STOP)),
    ([*ERROR, "after"], [*ERROR, "after"], 0),
    (["Traceback (most recent call last):", '  File "x.py", line 1'], ["Traceback (most recent call last):",
                                                                        '  File "x.py", line 1'], 0),  # cut short
])
def test_the_stops_output_is_folded_and_nothing_else(lines, shown, folded):
    for cut in range(0, len(lines) + 1, 7):  # however the lines come in batches
        fold = StopOutput()
        out = fold.feed(lines[:cut]) + fold.feed(lines[cut:]) + fold.end()
        assert out == shown and fold.folded == folded, cut


async def test_a_cancelled_runs_panes_end_with_one_line_saying_so(home):
    steps = [f"step={i}/200 loss=3.{i:02d}" for i in range(1, 39)]
    run = FedEvents([
        RunStateChanged("r", RunState.RUNNING, 1),
        NodeLines("r", 0, tuple(steps), 1), NodeLines("r", 1, ("node 1 ranks 2-3: step 38/200",), 1),
        RunStateChanged("r", RunState.CANCELLING, 1),
        NodeLines("r", 0, tuple(STOP[:9]), 2), NodeLines("r", 0, tuple(STOP[9:]), 3),
        NodeLines("r", 1, ("stopping: SIGTERM at step 38", *STOP), 2),
        RunFinished("r", RunState.CANCELLED, None, None),
    ], more=False)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 44)) as pilot:
        screen = RunMonitorScreen("r", 2, events=run)
        await app.push_screen(screen)
        panes = screen.pane(0), screen.pane(1), screen.pane(-1)

        def ended(pane) -> bool:
            return bool(pane.lines) and pane.lines[-1].startswith("── run cancelled")

        await wait_for(pilot, lambda: ended(panes[0]) and ended(panes[1]))
        await pilot.press("m")  # the merged pane
        await wait_for(pilot, lambda: ended(panes[2]))
        node0, node1, merged = (list(p.lines) for p in panes)
        assert node0 == [*steps, f"── run cancelled; {len(STOP)} lines of the stop's output (torchrun's "
                                 "tracebacks) folded: fsdp-tui logs r --node 0 has them"]
        assert node1 == ["node 1 ranks 2-3: step 38/200", "stopping: SIGTERM at step 38", node1[-1]]
        assert merged[-1] == (f"── run cancelled; {2 * len(STOP)} lines of the stop's output (torchrun's "
                              "tracebacks) folded: fsdp-tui logs r has them")
        assert not any("Traceback" in line or "SignalException" in line for line in node0 + node1 + merged)
