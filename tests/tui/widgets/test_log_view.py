"""The log pane's lines widget under Pilot: what it draws, how it follows and scrolls, what it keeps, and
that lines arriving or a scroll never lay the screen out again (Textual's ``Log`` did, at every batch)."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.geometry import Offset
from textual.selection import Selection
from textual.widgets import Log

from tui.widgets.log_view import CUT_MARK, LogView

SIZE = (40, 12)  # the view: 39 columns of text and the scrollbar, 12 rows


class OneLog(App):
    def __init__(self, widget) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget


def shown(view: LogView) -> list[str]:
    """The text of each drawn row, without the scrollbar's column."""
    return [view.render_line(y).text[:-1].rstrip() for y in range(view.size.height)]


def thumb_rows(view: LogView) -> list[int]:
    _, _, _, (_, track, thumb, _), _ = view._drawing()
    return [y for y in range(view.size.height) if list(view.render_line(y))[-1] == thumb]


async def test_it_follows_the_end_and_keys_scroll_it():
    view = LogView(max_lines=1_000)
    app = OneLog(view)
    async with app.run_test(size=SIZE) as pilot:
        view.focus()
        view.write_lines([f"line {i}" for i in range(5)])
        await pilot.pause()
        assert shown(view)[:6] == ["line 0", "line 1", "line 2", "line 3", "line 4", ""]
        assert thumb_rows(view) == [], "every line fits: no thumb"
        assert {list(view.render_line(y))[-1].style for y in range(12)} == {view.rich_style}, "nor a track"
        view.write_lines([f"line {i}" for i in range(5, 100)])
        await pilot.pause()
        assert shown(view)[-1] == "line 99" and view.at_end
        assert thumb_rows(view) == [11], "at the end, the thumb is at the bottom"
        await pilot.press("pageup")
        assert shown(view)[-1] == "line 88" and not view.at_end
        view.write_lines(["line 100"])  # not at the end: the view stays on what the user is reading
        await pilot.pause()
        assert shown(view)[-1] == "line 88"
        await pilot.press("home")
        assert shown(view)[0] == "line 0" and thumb_rows(view) == [0]
        await pilot.press("down", "down")
        assert shown(view)[0] == "line 2"
        await pilot.press("end")
        assert shown(view)[-1] == "line 100" and view.at_end
        view.auto_scroll = False
        view.write_lines(["line 101"])
        await pilot.pause()
        assert shown(view)[-1] == "line 100", "auto_scroll off: new lines do not move the view"


async def test_old_lines_go_and_the_view_keeps_its_lines():
    view = LogView(max_lines=50)
    app = OneLog(view)
    async with app.run_test(size=SIZE) as pilot:
        view.focus()
        view.write_lines([f"line {i}" for i in range(50)])
        await pilot.press("home", "pagedown")
        top = shown(view)[0]
        view.write_lines([f"line {i}" for i in range(50, 60)])  # the ten oldest are dropped
        await pilot.pause()
        assert view.line_count == 50 and view.lines[0] == "line 10"
        assert shown(view)[0] == top, "dropping old lines does not move what is read"
        # A selection counts lines from the first ever written: it still names the same text.
        number = view._dropped + view.view_y
        text, _ = view.get_selection(Selection(Offset(5, number), Offset(6, number + 1)))
        assert text == f"{top[5:]}\n{shown(view)[1][:6]}"


async def test_a_long_line_is_marked_and_right_shows_the_rest():
    view = LogView()
    app = OneLog(view)
    async with app.run_test(size=SIZE) as pilot:
        view.focus()
        view.write_lines(["short", "x" * 30 + "0123456789ABCDEF", "tab\there", "bell\x07end", "", "two\nlines"])
        await pilot.pause()
        rows = shown(view)
        assert rows[4:7] == ["", "two", "lines"], "an empty line is a line; a line with a newline is two"
        assert rows[0] == "short"
        assert rows[1] == "x" * 30 + "01234567" + CUT_MARK  # 38 cells of text and the mark
        assert rows[2] == "tab     here"
        assert rows[3] == "bell\ufffdend", "a control character is shown as a mark, never sent to the terminal"
        await pilot.press("right")
        assert shown(view)[1] == "x" * 23 + "0123456789ABCDEF", "as far right as the widest line needs, no mark"


@pytest.mark.parametrize("border", [False, True], ids=["bare", "in a border, as a node's pane"])
async def test_clicking_the_scrollbar_jumps_there(border):
    view = LogView()
    if border:
        view.styles.border = ("round", "white")
    app = OneLog(view)
    async with app.run_test(size=SIZE) as pilot:
        view.write_lines([f"line {i}" for i in range(200)])
        await pilot.pause()
        edge = 1 if border else 0  # the scrollbar is the content's last column, inside any border
        await pilot.click(LogView, offset=(SIZE[0] - 1 - edge, edge))
        assert view.view_y == 0
        await pilot.click(LogView, offset=(SIZE[0] - 1 - edge, SIZE[1] - 1 - edge))
        assert view.at_end
        await pilot.click(LogView, offset=(SIZE[0] - 1 - edge - 5, edge))
        assert view.at_end, "a click in the text is not a click in the scrollbar"


async def _layouts_while_writing(widget) -> int:
    app = OneLog(widget)
    async with app.run_test(size=SIZE) as pilot:
        widget.write_lines([f"line {i}" for i in range(3)])
        await pilot.pause()
        screen = app.screen
        layouts = [0]
        original = screen._refresh_layout

        def counted(*args, **kwargs):
            layouts[0] += 1
            original(*args, **kwargs)

        screen._refresh_layout = counted
        for batch in range(20):
            widget.write_lines([f"batch {batch} line {i}" for i in range(7)])
            await pilot.pause()
        return layouts[0]


async def test_lines_arriving_never_lay_the_screen_out():
    assert await _layouts_while_writing(LogView()) == 0
    assert await _layouts_while_writing(Log()) >= 10, "Textual's Log lays the screen out as it grows"


async def test_the_wheel_scrolls_it_and_at_the_end_goes_on_to_what_holds_it():
    from textual import events
    from textual.containers import VerticalScroll

    class InScroll(App):
        def compose(self) -> ComposeResult:
            with VerticalScroll():
                yield LogView(id="log")
                yield LogView(id="below")

    app = InScroll()
    async with app.run_test(size=SIZE) as pilot:
        view = app.query_one("#log", LogView)
        view.styles.height = SIZE[1] - 2
        app.query_one("#below", LogView).styles.height = SIZE[1]  # so the holder can scroll too
        view.write_lines([f"line {i}" for i in range(100)])
        await pilot.pause()
        holder = app.query_one(VerticalScroll)
        assert view.at_end and holder.scroll_y == 0
        await pilot._post_mouse_events([events.MouseScrollUp], view, offset=(3, 3))  # Pilot has no wheel
        await pilot.pause()
        assert view.view_y == view.max_view_y - 3 and holder.scroll_y == 0, "the log scrolled, not its holder"
        await pilot._post_mouse_events([events.MouseScrollDown], view, offset=(3, 3))
        await pilot.pause()
        assert view.at_end and holder.scroll_y == 0
        await pilot._post_mouse_events([events.MouseScrollDown], view, offset=(3, 3))
        await pilot.pause()
        assert view.at_end and holder.scroll_y > 0, "at its end, the wheel scrolls what holds it"
