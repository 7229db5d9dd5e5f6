"""The runs browser's filter and sort, and the ``:`` command bar: pure parts, then the real app under Pilot."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from launcher.events import RunState
from launcher.runs.core.store import RunSummary
from tests.support.tui import BROWSER_RUNS, RecordedRun, record, record_all, wait_for
from tui.app import FsdpTuiApp
from tui.commands import Command, CommandError, parse_command
from tui.screens.checkpoints import CheckpointsScreen
from tui.screens.command_bar import CommandBarModal
from tui.screens.editor import EditorScreen
from tui.screens.home import HomeScreen
from tui.widgets.runs_table import COLUMNS, RunsTable, matches, sort_key

ID = {run.run_id[-4:]: run.run_id for run in BROWSER_RUNS}
"""Run ids by their last four characters: a1f3, b2c4, c3d5, d4e6, e5f7."""


def _summary(run_id: str, loss: float | None, state: RunState = RunState.SUCCEEDED) -> RunSummary:
    return RunSummary(run_id=run_id, experiment="exp", state=state, attempt=1, num_nodes=1, hosts=("a",),
                      started_at=None, ended_at=None, last_loss=loss, best_eval_loss=None, step=None,
                      max_steps=None, workload_path=None)


@pytest.mark.parametrize("reverse, expected", [
    (False, ["small", "two", "ten", "none"]),
    (True, ["ten", "two", "small", "none"]),
])
def test_sort_key_orders_numbers_as_numbers_and_missing_last(reverse, expected):
    runs = [_summary("none", None), _summary("ten", 10.5), _summary("two", 2.5), _summary("small", 0.9)]
    ordered = sorted(runs, key=lambda r: sort_key(r, "loss", reverse), reverse=reverse)
    assert [r.run_id for r in ordered] == expected


@pytest.mark.parametrize("text, expected", [
    ("", True), ("EXP", True), ("x-1", True), ("fail", True), ("exp fail", True), ("exp done", False),
    ("succeeded", False),
])
def test_filter_matches_every_word_in_id_experiment_or_state(text, expected):
    assert matches(_summary("x-1", None, RunState.FAILED), text) is expected


@pytest.mark.parametrize("text, expected", [
    (":runs", Command("runs")), ("workloads", Command("workloads")), (":ckpt 2026", Command("ckpt", "2026")),
    (":checkpoints abc", Command("ckpt", "abc")), (" :theme fsdp-light ", Command("theme", "fsdp-light")),
    (":q", Command("quit")), (":QUIT", Command("quit")),
])
def test_parse_command(text, expected):
    assert parse_command(text) == expected


@pytest.mark.parametrize("text, message", [
    (":", "type a command"), (":frobnicate", "unknown command ':frobnicate'"), (":ckpt", "usage: :ckpt RUN"),
    (":theme a b", "usage: :theme NAME"), (":runs now", ":runs takes no argument"),
])
def test_parse_command_explains_bad_input(text, message):
    with pytest.raises(CommandError, match=message):
        parse_command(text)


def _cells(table: RunsTable, column: str) -> list[str]:
    """The shown text of ``column`` (a key of COLUMNS), top to bottom."""
    return [str(table.get_cell(row_id, column)) for row_id in table.shown_ids]


def _last_notice(app: FsdpTuiApp) -> str:
    return str(list(app._notifications)[-1].message)


def _tails(table: RunsTable) -> list[str]:
    return [run_id[-4:] for run_id in table.shown_ids]


async def _home_with_runs(pilot, app: FsdpTuiApp) -> RunsTable:
    await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.runs_table.row_count == 5)
    return app.screen.runs_table


async def test_filter_narrows_as_you_type_and_escape_clears_it(home):
    record_all(home)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await _home_with_runs(pilot, app)
        screen = app.screen
        assert _tails(table) == ["e5f7", "d4e6", "c3d5", "b2c4", "a1f3"]  # newest first
        await pilot.press("slash")
        box = screen.query_one("#run-filter", Input)
        row = screen.query_one("#filter-row")
        assert app.focused is box and row.display
        await pilot.press(*"lla")
        assert _tails(table) == ["c3d5", "a1f3"]
        assert set(_cells(table, "experiment")) == {"llama-sft"}
        # "cancelled" types c, l, n and d: none of them compares, launches, starts a workload or deletes.
        await pilot.press("space", *"cancelled")
        assert _tails(table) == ["c3d5"]
        assert _cells(table, "state") == ["cancelled"]
        assert app.screen is screen and not app._notifications
        assert "1 of 5 runs matching 'lla cancelled'" in str(screen.query_one("#runs-title").render())
        await pilot.press("enter")
        assert app.focused is table and row.display and _tails(table) == ["c3d5"]
        await pilot.press("escape")
        assert box.value == "" and not row.display and box.disabled
        assert app.focused is table and table.row_count == 5
        await pilot.press("slash", *"FAIL")
        assert _cells(table, "state") == ["failed"]
        await pilot.press("escape")
        assert table.row_count == 5
        await pilot.press("slash", *"no-such-run")
        assert table.row_count == 0
        assert "0 of 5 runs matching 'no-such-run'" in str(screen.query_one("#runs-title").render())


async def test_a_store_with_more_runs_than_the_window_shows_the_newest_and_the_filter_asks_the_store(
        home, monkeypatch):
    import tui.screens.home as home_screen

    monkeypatch.setattr(home_screen, "HOME_RUNS", 3)  # the window (500) at a size the test can fill
    record_all(home)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.runs_table.row_count == 3)
        screen, table = app.screen, app.screen.runs_table
        assert _tails(table) == ["e5f7", "d4e6", "c3d5"]
        title = screen.query_one("#runs-title")
        assert "Runs: the newest 3 of 5 runs, newest first" in str(title.render())
        # the oldest run is not in the window: the filter finds it through the store
        await pilot.press("slash", *"a1f3")
        await wait_for(pilot, lambda: _tails(table) == ["a1f3"])
        assert "1 run matching 'a1f3' (of 5 kept)" in str(title.render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: _tails(table) == ["e5f7", "d4e6", "c3d5"])
        await pilot.press("slash", *"llama")  # two match, and the window holds three: all of them
        await wait_for(pilot, lambda: _tails(table) == ["c3d5", "a1f3"])
        assert "2 runs matching 'llama' (of 5 kept)" in str(title.render())


async def test_sort_keys_order_numbers_as_numbers_with_missing_values_last(home):
    record_all(home)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await _home_with_runs(pilot, app)
        table.focus()
        keys = [c.key for c in COLUMNS]
        await pilot.press(*["s"] * (keys.index("loss") + 1))
        assert table.sort_column == "loss" and not table.sort_reverse
        assert _cells(table, "loss") == ["0.9000", "1.2345", "2.5000", "10.5000", "-"]
        assert str(table.columns["loss"].label).endswith("▲")
        await pilot.press("S")
        assert _cells(table, "loss") == ["10.5000", "2.5000", "1.2345", "0.9000", "-"]
        assert str(table.columns["loss"].label).endswith("▼")
        assert "by last loss descending" in str(app.screen.query_one("#runs-title").render())
        await pilot.press("s")
        assert table.sort_column == "eval" and not table.sort_reverse
        assert _cells(table, "eval") == ["1.1000", "1.5000", "9.0000", "-", "-"]
        await pilot.press("S")
        assert _cells(table, "eval") == ["9.0000", "1.5000", "1.1000", "-", "-"]
        await pilot.press("s")  # past the last column: back to store order
        assert table.sort_column is None and _tails(table) == ["e5f7", "d4e6", "c3d5", "b2c4", "a1f3"]
        await pilot.press("s", "s")
        assert table.sort_column == "experiment"
        assert _cells(table, "experiment") == ["bloom-squad", "llama-sft", "llama-sft", "tiny-cpu", "tiny-cpu"]
        await pilot.press("s", "s")
        assert table.sort_column == "nodes"
        assert _cells(table, "nodes") == ["1", "1", "2", "2", "4"]
        await pilot.press("s", "s")
        assert table.sort_column == "duration"
        assert _tails(table) == ["e5f7", "b2c4", "c3d5", "a1f3", "d4e6"]
        assert _cells(table, "duration") == ["0:45", "1:35", "10:00", "1:02:03", "-"]


async def test_clicking_a_header_sorts_by_it_and_again_reverses(home):
    record_all(home)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await _home_with_runs(pilot, app)
        columns = table.ordered_columns
        at = [c.key.value for c in columns].index("duration")
        x = sum(c.get_render_width(table) for c in columns[:at]) + 2
        await pilot.click(RunsTable, offset=(x, 0))
        await wait_for(pilot, lambda: table.sort_column == "duration")  # the header's message, handled
        assert not table.sort_reverse
        assert _tails(table) == ["e5f7", "b2c4", "c3d5", "a1f3", "d4e6"]
        await pilot.click(RunsTable, offset=(x, 0))
        await wait_for(pilot, lambda: table.sort_reverse)
        assert _tails(table) == ["a1f3", "c3d5", "b2c4", "e5f7", "d4e6"]


async def test_filter_sort_and_cursor_survive_a_reload(home):
    record_all(home)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        table = await _home_with_runs(pilot, app)
        await pilot.press("slash", *"llama", "enter")
        await pilot.press(*["s"] * 6)  # by duration
        assert table.sort_column == "duration" and _tails(table) == ["c3d5", "a1f3"]
        table.move_cursor(row=1)
        record(home, RecordedRun("20260301-1400-llama-sft-f6a8", "llama-sft", RunState.FAILED, 2, 18000, 30,
                                 3.0, None, 5, 100), created_order=9)
        record(home, RecordedRun("20260301-1500-other-a7b9", "other", RunState.FAILED, 1, 18000, 1, 3.0),
               created_order=10)
        await pilot.press("r")
        await wait_for(pilot, lambda: len(table.runs) == 7)
        assert _tails(table) == ["f6a8", "c3d5", "a1f3"]
        assert table.selected_id == ID["a1f3"]


async def test_command_bar_runs_workloads_ckpt_theme_quit(home, tmp_path):
    record_all(home)
    wl = tmp_path / "w.yaml"
    wl.write_text("experiment_name: x\ncommand: y\n")
    app = FsdpTuiApp(home, workload=wl)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        # In the editor ":" is text, not a command.
        await pilot.press("end", "colon")
        assert app.screen.query_one("TextArea").text.startswith("experiment_name: x:")
        assert not isinstance(app.screen, CommandBarModal)
        app.screen.set_focus(None)
        await pilot.press("colon")
        assert isinstance(app.screen, CommandBarModal)
        await pilot.press(*"runs", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
        assert app.focused is app.screen.runs_table
        await pilot.press("colon", *"workloads", "enter")
        await pilot.pause()
        assert app.focused is app.screen.query_one("#workloads")

        await pilot.press("colon", *"ckpt 20260301-11", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CheckpointsScreen))
        assert app.screen.run_id == ID["c3d5"]
        await pilot.press("escape")
        await pilot.press("colon", *"ckpt 20260301", "enter")
        await pilot.pause()
        assert isinstance(app.screen, HomeScreen)
        assert "'20260301' matches 5 runs" in _last_notice(app)

        await pilot.press("colon", *"theme fsdp-light", "enter")
        await pilot.pause()
        assert app.theme == "fsdp-light"
        await pilot.press("colon", *"theme no-such", "enter")
        await pilot.pause()
        assert app.theme == "fsdp-light"
        assert "unknown theme 'no-such'" in _last_notice(app)
        await pilot.press("colon", *"frobnicate", "enter")
        await pilot.pause()
        assert "unknown command ':frobnicate'" in _last_notice(app)
        assert isinstance(app.screen, HomeScreen)

        await pilot.press("colon", *"ru", "escape")
        assert isinstance(app.screen, HomeScreen) and app.return_code is None
        await pilot.press("colon", "q", "enter")
        await pilot.pause()
        assert app.return_code == 0


def test_workload_folders_are_shown_relative_to_samples_cwd_or_home(tmp_path, monkeypatch):
    from pathlib import Path

    from tui.screens.workload_files import SAMPLES_ROOT, folder_label

    monkeypatch.chdir(tmp_path)
    assert folder_label(SAMPLES_ROOT / "byo_script") == "sample_workloads/byo_script"
    assert folder_label(tmp_path / "exp") == "./exp"
    assert folder_label(tmp_path) == "."
    assert folder_label(Path.home() / "w") == "~/w"
    assert folder_label(Path("/elsewhere/w")) == "/elsewhere/w"


def test_the_current_folders_samples_are_listed_instead_of_the_shipped_ones(tmp_path, monkeypatch):
    from tui.screens.workload_files import SAMPLES_ROOT, find_workloads, folder_label

    (tmp_path / "sample_workloads").mkdir()
    (tmp_path / "sample_workloads" / "mine.yaml").write_text("experiment_name: mine\n")
    monkeypatch.chdir(tmp_path)
    found = find_workloads([])
    assert found == [(tmp_path / "sample_workloads" / "mine.yaml").resolve()]
    assert not any(p.is_relative_to(SAMPLES_ROOT) for p in found)
    assert folder_label(found[0].parent) == "sample_workloads"
