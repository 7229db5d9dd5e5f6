"""What a screen asks of the app travels as one of ``tui/messages.py``'s typed messages, handled by the app;
a worker's result reaches its own screen as a message, and one that comes after its screen closed is
dropped. The real app under Pilot; the launches themselves are left out (recorded, nothing starts)."""

from __future__ import annotations

import pytest
from textual.css.query import NoMatches
from textual.widgets import DataTable, Input, Label

from launcher.events import RunState
from tests.support.tui import RecordedRun, record, wait_for
from tui import messages
from tui.app import FsdpTuiApp
from tui.screens.editor import EditorScreen
from tui.screens.from_worker import unless_taken_apart
from tui.screens.home import HomeScreen
from tui.screens.monitor import RunMonitorScreen
from tui.screens.samples import NO_SAMPLES, SamplesScreen

ASKED = (messages.RunChosen, messages.SweepChosen, messages.WorkloadChosen, messages.LaunchAsked,
         messages.RelaunchAsked, messages.ResumeAsked, messages.SweepLaunchAsked, messages.NettestAsked,
         messages.StoreFoundDamaged)
RUN = RecordedRun("20260301-0900-exp-a1f3", "exp", RunState.SUCCEEDED, 1, 0, 60)
LOCAL = "experiment_name: exp\ncompute: {accelerator_type: CPU, num_accelerators: 1}\ncommand: python train.py\n"
"""A workload for this machine (no host to reach while the editor checks it)."""


def _stub_launches(app: FsdpTuiApp, monkeypatch) -> list[tuple]:
    """The app's launchers, replaced by a record of what they were asked (no run starts)."""
    done: list[tuple] = []
    for name in ("launch_workload", "relaunch_run", "launch_sweep", "open_nettest"):
        monkeypatch.setattr(app, name, lambda *args, name=name, **kwargs: done.append((name, *args, *kwargs.values())))
    return done


async def test_keys_on_each_screen_ask_the_app_with_typed_messages(home, tmp_path, monkeypatch):
    record(home, RUN)
    monkeypatch.chdir(tmp_path)
    workload = (tmp_path / "w.yaml").resolve()
    workload.write_text(LOCAL)
    posted: list = []

    def hook(message) -> None:  # each message once (a bubbling one is seen by the screen, then the app)
        if isinstance(message, ASKED) and not any(message is seen for seen in posted):
            posted.append(message)

    app = FsdpTuiApp(home)
    done = _stub_launches(app, monkeypatch)
    async with app.run_test(size=(140, 40), message_hook=hook) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.runs_table.row_count == 1)
        home_screen = app.screen
        workloads = home_screen.query_one("#workloads", DataTable)
        keys = [workloads.coordinate_to_cell_key((row, 0)).row_key.value for row in range(workloads.row_count)]
        workloads.focus()
        workloads.move_cursor(row=keys.index(str(workload)))
        await pilot.press("l", "w")
        home_screen.focus_runs()
        await pilot.press("l", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen))
        assert app.screen.run_id == RUN.run_id
        await pilot.press("l", "escape")
        await wait_for(pilot, lambda: app.screen is home_screen)
        workloads.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        editor = app.screen
        assert editor.path == workload
        editor.query_one("#overrides", Input).value = "experiment_name=renamed"
        await wait_for(pilot, lambda: editor.shown_version == editor.version and editor.validations_shown > 0)
        assert not any(p.is_error for p in editor.problems)
        await pilot.press("ctrl+r", "ctrl+n")
        await wait_for(pilot, lambda: len(done) == 6)

    assert posted == [
        messages.LaunchAsked(workload, []),
        messages.SweepLaunchAsked(workload),
        messages.RelaunchAsked(RUN.run_id),
        messages.RunChosen(RUN.run_id),
        messages.RelaunchAsked(RUN.run_id),
        messages.WorkloadChosen(workload),
        messages.LaunchAsked(workload, ["experiment_name=renamed"]),
        messages.NettestAsked(workload, ["experiment_name=renamed"]),
    ]
    assert done == [
        ("launch_workload", workload, []),
        ("launch_sweep", workload),
        ("relaunch_run", RUN.run_id, []),
        ("relaunch_run", RUN.run_id, []),
        ("launch_workload", workload, ["experiment_name=renamed"]),
        ("open_nettest", workload, ["experiment_name=renamed"]),
    ]


async def test_a_workers_result_reaches_its_screen_and_is_dropped_once_the_screen_is_gone(home):
    record(home, RUN)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
        screen = SamplesScreen(RUN.run_id)
        await app.push_screen(screen)
        said = screen.query_one("#samples-said", Label)
        await wait_for(pilot, lambda: str(said.render()) == NO_SAMPLES)  # the thread's SamplesRead, drawn
        assert screen.post_message(messages.SamplesRead("drawn on its screen", ["a line"]))
        await wait_for(pilot, lambda: str(said.render()) == "drawn on its screen")
        await app.pop_screen()
        await wait_for(pilot, lambda: not screen.is_attached)
        assert not screen.post_message(messages.SamplesRead("too late", [])), "a closed screen takes no result"
        with unless_taken_apart(screen):  # a result drawn while its screen is taken apart: dropped quietly
            screen.query_one("#samples-said")
        with pytest.raises(NoMatches), unless_taken_apart(app.screen):  # a live screen without it: a bug
            app.screen.query_one("#samples-said")
        await pilot.pause()
    assert app.return_code in (None, 0)


def test_what_is_asked_bubbles_to_the_app_and_a_workers_result_stays_on_its_screen():
    results = [m for m in vars(messages).values() if isinstance(m, type) and issubclass(m, messages.Message)
               and m is not messages.Message and m not in ASKED]
    assert [m.__name__ for m in ASKED if not m.bubble] == []
    assert [m.__name__ for m in results if m.bubble] == []
    assert results
