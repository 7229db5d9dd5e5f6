"""The ranks screen under Pilot: opened from the monitor with ``r``, a heatmap per rank, the slow rank's row
marked, and records appended while it is open read in."""

from __future__ import annotations

import json

from rich.text import Text
from textual.widgets import DataTable, Label

from launcher.events import RunState
from tests.support.tui import RecordedRun, record
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen
from tui.screens.ranks import RanksScreen


def _metrics(steps):
    """Four ranks on two nodes; rank 3 (node 1) does its own work 60% slower at every step."""
    return [{"step": s, "kind": "train", "max_steps": 40, "loss": 1.0,
             "rank_step_s": [0.010, 0.011, 0.0105, 0.017]} for s in steps]


async def test_r_opens_the_ranks_heatmap_with_the_slow_rank_marked(home):
    run = RecordedRun("run-ranks", "ranks", RunState.SUCCEEDED, 2, 0, 60, 1.0, None, 30, 40)
    directory = record(home, run, metrics=_metrics(range(1, 31)))
    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        app.push_screen(RunMonitorScreen("run-ranks", 2))
        await pilot.pause()
        await pilot.press("r")
        await pilot.pause()
        assert isinstance(app.screen, RanksScreen)
        screen = app.screen
        table = screen.query_one(DataTable)

        async def until(predicate):
            for _ in range(300):
                if predicate():
                    return
                await pilot.pause(0.1)
            raise AssertionError("condition not reached in time")

        await until(lambda: table.row_count == 4)
        rows = [table.get_row_at(i) for i in range(4)]
        assert [str(r[0]) for r in rows] == ["", "", "", "SLOW"]
        assert [str(r[2]) for r in rows] == ["0", "0", "1", "1"]
        assert str(rows[3][-1]) == "+58%" and isinstance(rows[3][-1], Text) and "red" in str(rows[3][-1].style)
        said = str(screen.query_one("#ranks-said", Label).render())
        assert said.startswith("rank 3 on node 1 +58% over 20 steps")
        path = directory / "metrics.jsonl"  # the run goes on: new steps are read in
        path.write_text(path.read_text() + "".join(json.dumps(m) + "\n" for m in _metrics(range(31, 36))))
        await until(lambda: str(table.columns[list(table.columns)[-1]].label) == "35")
        await pilot.press("escape")
        assert isinstance(app.screen, RunMonitorScreen)
