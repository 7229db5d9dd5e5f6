"""The real app under Pilot: the merged log view keeps following, the editor keeps keys and unsaved text."""

from __future__ import annotations

from textual.widgets import TextArea

from launcher.events import NodeLines
from tests.support.tui import FedEvents, wait_for
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen


def _at_end(log) -> bool:
    return log.line_count > 0 and log.view_y == log.max_view_y


def _last(log) -> str:
    return log.lines[-1] if log.line_count else ""


async def test_the_merged_view_follows_through_follow_off_and_on_and_a_filter(home):
    run = FedEvents()
    sent = [0]

    def send(n: int) -> None:
        for _ in range(n):
            step = sent[0]
            sent[0] += 1
            run.put(NodeLines("r", step % 2, (f"step={step}/400",), step))

    app = FsdpTuiApp(home)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = RunMonitorScreen("r", 2, events=run)
        await app.push_screen(screen)
        await pilot.press("m")
        merged = screen.pane(-1)
        assert screen.focused is merged, "keys such as end go to the pane on screen"
        send(120)
        await wait_for(pilot, lambda: _last(merged) == "[1] step=119/400" and _at_end(merged))
        await pilot.press("f")
        send(60)
        await wait_for(pilot, lambda: _last(merged) == "[1] step=179/400")
        held = merged.view_y
        assert held < merged.max_view_y, "following off keeps the view where it was"
        await pilot.press("f")
        await wait_for(pilot, lambda: _at_end(merged))
        send(60)
        await wait_for(pilot, lambda: _last(merged) == "[1] step=239/400" and _at_end(merged))
        await pilot.press("slash", *"step=2", "enter")
        await wait_for(pilot, lambda: all("step=2" in line for line in merged.lines))
        send(40)
        await wait_for(pilot, lambda: _last(merged) == "[1] step=279/400" and _at_end(merged))
        assert screen.focused is merged
        await pilot.press("m")
        assert screen.focused is screen.pane(0)
        await wait_for(pilot, lambda: _last(screen.pane(0)) == "step=278/400" and _at_end(screen.pane(0)))


async def test_leaving_or_quitting_with_unsaved_text_asks_save_discard_or_stay(home, tmp_path):
    from tui.screens.editor import EditorScreen
    from tui.screens.home import HomeScreen
    from tui.screens.templates import TemplateModal
    from tui.screens.unsaved import UnsavedModal

    new = tmp_path / "new.yaml"
    app = FsdpTuiApp(home, workload=new)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TemplateModal))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen) and app.screen.area.text)
        editor = app.screen
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, UnsavedModal))
        await pilot.press("escape")  # stay
        await wait_for(pilot, lambda: app.screen is editor)
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, UnsavedModal))
        await pilot.press("d")  # discard: the app quits, nothing written
        await wait_for(pilot, lambda: app._exit)
    assert not new.exists()

    app = FsdpTuiApp(home, workload=new)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TemplateModal))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen) and app.screen.area.text)
        text = app.screen.area.text
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, UnsavedModal))
        await pilot.press("s")  # save, then leave the editor
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
        assert new.read_text().rstrip("\n") == text.rstrip("\n")
        await pilot.press("q")  # nothing unsaved any more: quits at once
        await wait_for(pilot, lambda: app._exit)


async def test_a_fix_and_f8_leave_the_keys_in_the_text(home, tmp_path):
    from tui.screens.editor import EditorScreen

    bad = tmp_path / "bad.yaml"
    bad.write_text("experiment_name: t\ncommand: echo hi\nmax_retrys: 1\n")
    app = FsdpTuiApp(home, workload=bad)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen) and app.screen.problems)
        area = app.screen.query_one(TextArea)
        theme = app.theme
        await pilot.press("shift+f8", "f")  # the problems list, then its fix: the text has the keys again
        assert area.document.get_line(2) == "max_retries: 1" and app.screen.focused is area
        await pilot.press("t", "i")  # typed into the text, not the theme key
        assert area.document.get_line(2) == "timax_retries: 1" and app.theme == theme
        await wait_for(pilot, lambda: any(p.is_error for p in app.screen.problems))
        area.cursor_location = (0, 0)
        await pilot.press("f8")  # the cursor to the problem; the text keeps the keys
        assert area.cursor_location == (2, 0) and app.screen.focused is area
        await pilot.press("ctrl+end")
        assert area.cursor_location == area.document.end
        await pilot.press("ctrl+shift+home")
        assert area.selection.start == area.document.end and area.selection.end == (0, 0)
        await pilot.press("ctrl+home")
        assert area.cursor_location == (0, 0) and area.selection.is_empty
        await pilot.press("ctrl+shift+end")
        assert area.selected_text == area.text



async def test_f_says_follow_off_in_the_frame_it_causes(home, monkeypatch):
    """``f`` shows "follow off" at once (not at the next 2 Hz redraw: here there is none), and on again."""
    monkeypatch.setattr("tui.screens.monitor.DRAW_HZ", 0.001)  # no redraw during the test
    app = FsdpTuiApp(home)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = RunMonitorScreen("r", 2, events=FedEvents())
        await app.push_screen(screen)
        summary = screen.query_one("#summary")
        await pilot.press("f")
        assert "follow off (f)" in str(summary.render())
        await pilot.press("f")
        assert "follow on (f)" in str(summary.render())


async def test_new_lines_wait_once_after_a_key_then_come(home, monkeypatch):
    """A key (or a click, or the wheel) is noted by the app; the panes' flush then lets the key's frame go
    first: the tick after it waits, the next one writes (never two waits in a row, so while keys keep
    coming each group of panes is still written every other tick); with no key, each tick writes."""
    import tui.screens.monitor as monitor

    monkeypatch.setattr(monitor, "LOG_HZ", 0.001)  # the test calls the flush itself
    monkeypatch.setattr(monitor, "DRAW_HZ", 0.001)
    run = FedEvents()
    app = FsdpTuiApp(home)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = RunMonitorScreen("r", 2, events=run)
        await app.push_screen(screen)
        app.input_at = 0.0
        await pilot.press("f", "f")
        assert app.input_within(5.0), "a key press is noted"
        for rank in (0, 1):
            run.put(NodeLines("r", rank, (f"node {rank} line",), 0))
        await wait_for(pilot, lambda: screen.view.node(1).lines == 1)
        panes = screen.pane(0), screen.pane(1)

        def written() -> list[int]:
            return [pane.line_count for pane in panes]

        keys = [True]
        monkeypatch.setattr(app, "input_within", lambda seconds: keys[0])  # a key just came, or none for long
        screen.flush_logs()
        assert written() == [0, 0], "the tick right after a key waits"
        screen.flush_logs()
        assert sorted(written()) == [0, 1], "the next one writes its group"
        screen.flush_logs()
        assert sorted(written()) == [0, 1], "still keys: that group's tick waits once"
        screen.flush_logs()
        assert written() == [1, 1]
        keys[0] = False
        for rank in (0, 1):
            run.put(NodeLines("r", rank, ("again",), 1))
        await wait_for(pilot, lambda: all(len(pane.pending) == 1 for pane in panes))
        screen.flush_logs()
        screen.flush_logs()
        assert written() == [2, 2], "no key: every tick writes"
