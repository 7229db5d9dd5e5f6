"""A kept interconnect test found in the command palette and shown as a table, verdict and bars."""

from __future__ import annotations

import json

from textual.command import CommandPalette
from textual.widgets import DataTable, Static

from launcher.api.nettests import NettestRecord
from launcher.events import RunState
from tests.support.nettest import result
from tests.support.tui import wait_for
from tui.app import FsdpTuiApp
from tui.screens.nettest import NettestScreen


async def test_a_kept_test_opens_from_the_palette_with_its_table_and_verdict(home):
    (home / "nettests").mkdir(parents=True)
    record = {"run_id": "20261125-0700-nettest-x-ab12", "state": "succeeded", "started_at": 1.0, "wall_s": 9.0,
              "nodes": ["alpha", "beta", "gamma"], "result": result(nnodes=3, local=2), "problems": []}
    (home / "nettests" / "20261125-0700-nettest-x-ab12.json").write_text(json.dumps(record))
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"nettest 20261125-0700")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, NettestScreen)
                       and app.screen.query_one(DataTable).row_count > 0)
        screen = app.screen
        # 3 ops x 1 size in: the world, across nodes, and inside each of the 3 nodes
        assert screen.query_one(DataTable).row_count == 3 * 5
        verdict = str(screen.query_one("#nettest-verdict", Static).render())
        assert verdict.startswith("slow node: node 2 (gamma): ") and screen.query_one("#nettest-verdict").has_class("-slow")
        assert len(screen.query("PlotextPlot")) == 2


async def test_the_monitor_names_the_newest_test_of_its_nodes(home):
    from tests.support.tui import record_lines
    from tui.screens.monitor import RunMonitorScreen

    record_lines(home, "run-net", {0: ["a"], 1: ["b"]}, [], RunState.SUCCEEDED)
    (home / "nettests").mkdir(parents=True)
    record = {"run_id": "t-net", "started_at": 1.0, "nodes": ["a", "b"], "result": result(nnodes=2, local=1)}
    (home / "nettests" / "t-net.json").write_text(json.dumps(record))
    app = FsdpTuiApp(home, run_id="run-net")
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen) and app.screen.sub_title)
        assert app.screen.sub_title.startswith("network (t-net): ")
        assert app.screen.sub_title.endswith("two nodes: one pair, nothing to compare it with")


async def test_a_pair_measured_twice_is_one_bar_with_the_figure_the_verdict_counts(home):
    """(1, 2) slow in the neighbour round and measured again in the tournament: one bar, labelled; what
    the time budget cut is said under the headline."""
    raw = result(nnodes=3, local=1, pair_s=(0.1, 0.5, 0.1))
    raw["pairs"].append({"round": 3, "a": 1, "b": 2, "stage": "tournament", "bytes": 4 << 20,
                         "times": [0.4, 0.4, 0.4]})
    raw["cuts"] = [{"scope": "world", "size": 16 << 20, "kept": 0, "busbw": 25e6, "predicted_s": 9.1, "budget_s": 2.3}]
    record = {"run_id": "t-twice", "state": "succeeded", "started_at": 1.0, "nodes": ["a", "b", "c"], "result": raw}
    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        app.push_screen(NettestScreen(record=NettestRecord.from_wire(record)))
        await wait_for(pilot, lambda: isinstance(app.screen, NettestScreen) and len(app.screen.query("PlotextPlot")) == 2)
        await pilot.pause()
        by_pair = app.screen.query("PlotextPlot")[1]
        drawn = str(by_pair.render())
        assert drawn.count("1-2") == 1 and "1-2 (best of 2)" in drawn
        assert drawn.count("0-1") == 1 and drawn.count("0-2") == 1
        status = str(app.screen.query_one("#nettest-status", Static).render())
        assert "budget: whole world: 16 MiB skipped: at 25.0 MB/s it would take 9.1 s" in status
