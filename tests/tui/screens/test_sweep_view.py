"""The sweep view over a recorded sweep (pilot tests and SVG snapshots at 80x24 and 160x48), and the
home screen's marked runs opening the same view. Data and times are fixed; nothing runs for real."""

from __future__ import annotations

import pytest
from textual.widgets import TabbedContent

from tests.support.recorded_sweep import SWEEP_ID, record_sweep, run_id
from tests.support.tui import wait_for
from tui.app import FsdpTuiApp
from tui.screens.home import HomeScreen
from tui.screens.sweep import SweepScreen
from tui.widgets.comparison_plots import LossCurves
from tui.widgets.comparison_table import ComparisonTable, bar

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


async def _open_sweep(pilot, tab: str = "table") -> SweepScreen:
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
    app.open_sweep(SWEEP_ID)
    await wait_for(pilot, lambda: isinstance(app.screen, SweepScreen) and app.screen.loaded >= 1)
    screen = app.screen
    screen.action_tab(tab)
    await pilot.pause()
    return screen


def test_bar_fills_in_eighths():
    assert bar(1.0, 4) == "████" and bar(0.0, 4) == "    " and bar(0.5, 3) == "█▌ "


async def test_every_variant_is_a_row_with_its_numbers_sortable(home, workdir):
    record_sweep(home)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await _open_sweep(pilot)
        table = screen.query_one(ComparisonTable)
        assert table.row_count == 5
        assert [r.state for r in screen.rows] == ["succeeded", "succeeded", "succeeded", "failed", "skipped"]
        assert "ValueError" in str(table.get_row(run_id(4))[-1])
        assert "cancelled: 3/5 succeeded" in str(screen.query_one("#sweep-title").render())
        await pilot.press("s", "s", "s")  # variant, state, procs, then tokens/s
        await pilot.press("s")
        assert table.sort_by == "tokens_per_s"
        assert [str(k.value) for k in table.rows][:3] == [run_id(4), run_id(1), run_id(2)]
        await pilot.press("S")
        assert [str(k.value) for k in table.rows][0] == run_id(3)
        await pilot.press("2")
        assert screen.query_one(TabbedContent).active == "loss"
        curves = screen.query_one(LossCurves)
        assert len(curves.labels) == 4  # one line per run that reported a loss
        await pilot.press("escape")
        assert isinstance(app.screen, HomeScreen)


async def test_marked_runs_open_the_comparison_with_their_diffs(home, workdir):
    record_sweep(home)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 48)) as pilot:
        # The runs and the sweeps arrive one after the other from the same load.
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.runs_table.row_count == 4
                       and app.screen.has_class("-has-sweeps"))
        app.screen.runs_table.focus()
        for _ in range(3):
            await pilot.press("space", "down")
        assert len(app.marked_runs) == 3
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, SweepScreen) and app.screen.loaded >= 1)
        assert app.screen.query_one(ComparisonTable).row_count == 3
        assert app.screen.diff_text.count("(same workload)") == 2


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("tab", ["table", "loss", "memory"])
def test_snapshot(snap_compare, home, workdir, utc, size, tab):
    record_sweep(home)

    async def ready(pilot) -> None:
        await _open_sweep(pilot, tab)
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(FsdpTuiApp(home), terminal_size=SIZES[size], run_before=ready)
