"""A log pane's lines, painted and never laid out again: lines arriving or a scroll repaint this widget only.

Textual's ``Log`` is a ``ScrollView``: every batch that grows it changes its virtual size, which lays out
the whole screen again; every scroll (following the newest line is one per batch) goes through the
screen's scroll pass; each batch starts a thread worker to measure the new lines; its two scrollbars and
corner are widgets drawn through Rich, about as costly as the lines themselves; and it renders every
shown line from scratch at each frame. With 8 panes at 10 batches a second that was most of the app's
drawing (BENCHMARKS.md, the app under load). This widget keeps its own view (``view_y``, ``view_x``), a
one-column scrollbar drawn with its lines, each line's drawn strip until it changes, and the widths of
the lines it was given. It is sized by its container, like a pane in the monitor's grid.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region
from textual.selection import Selection
from textual.strip import Strip
from textual.widget import Widget

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
WHEEL_LINES = 3
"""Lines one turn of the mouse wheel scrolls."""
SIDE_STEP = 8
"""Columns ``left`` and ``right`` scroll a log whose lines are wider than it."""
CUT_MARK = "›"
"""Drawn in the last column of a line that goes on past the edge (``right`` scrolls to the rest)."""
CUT_STYLE = Style(dim=True, bold=True)
CACHED_LINES = 4_096
"""Drawn lines kept before the cache starts again (a screenful is a few dozen)."""


def _shown(line: str) -> str:
    """A line as one row of cells: tabs expanded, any control character left shows as a replacement mark
    (the monitor's lines come sanitized; this keeps the widget safe with any text)."""
    if line.isprintable():
        return line
    return _CONTROL.sub("\ufffd", line.expandtabs())


def _width(line: str) -> int:
    return len(line) if line.isascii() else cell_len(line)


class LogView(Widget, can_focus=True):
    """Lines of text with a scrollbar: ``write_lines`` appends (following the end if ``auto_scroll`` and
    the view was there), ``max_lines`` bounds what is kept (the oldest go), ``clear`` empties it. Keys:
    arrows, page up/down, home/end; the mouse wheel; text can be selected and copied like ``Log``'s."""

    DEFAULT_CSS = """
    LogView { background: $surface; color: $text; height: 1fr; }
    LogView:focus { background-tint: $foreground 5%; }
    """
    BINDINGS = [
        Binding("up", "scroll_lines(-1)", "up", show=False),
        Binding("down", "scroll_lines(1)", "down", show=False),
        Binding("pageup", "scroll_pages(-1)", "page up", show=False),
        Binding("pagedown", "scroll_pages(1)", "page down", show=False),
        Binding("home", "scroll_home", "top", show=False),
        Binding("end", "scroll_end", "end", show=False),
        Binding("left", "scroll_side(-1)", "left", show=False),
        Binding("right", "scroll_side(1)", "right", show=False),
    ]

    def __init__(self, max_lines: int | None = None, auto_scroll: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_lines = max_lines
        self.auto_scroll = auto_scroll
        """New lines move the view to the end when it was there (as ``Log``)."""
        self._lines: list[str] = []
        self._dropped = 0
        """Lines dropped from the front so far: a line's number, for the cache and for selections, is its
        index plus this, so dropping old lines does not redraw the ones shown."""
        self._widest = 0
        self.view_y = 0
        """The first line shown (an index into ``lines``)."""
        self.view_x = 0
        """The first column shown."""
        self._segments: dict[int, list[Segment]] = {}
        """Drawn lines by line number, for the current ``view_x``, width and style."""
        self._drawn_for: tuple | None = None
        self._styles: tuple[Style, Segment, Segment, Style] | None = None
        self._pass: tuple | None = None

    @property
    def lines(self) -> Sequence[str]:
        """The kept lines, oldest first (as shown: tabs expanded, control characters marked)."""
        return self._lines

    @property
    def line_count(self) -> int:
        return len(self._lines)

    @property
    def text_width(self) -> int:
        """Columns for text: the last column is the scrollbar."""
        return max(0, self.size.width - 1)

    @property
    def max_view_y(self) -> int:
        return max(0, len(self._lines) - self.size.height)

    @property
    def max_view_x(self) -> int:
        return max(0, self._widest - self.text_width)

    @property
    def at_end(self) -> bool:
        """The newest line is in view."""
        return self.view_y >= self.max_view_y

    def write_line(self, line: str) -> LogView:
        return self.write_lines([line])

    def write_lines(self, lines: Iterable[str]) -> LogView:
        follow = self.auto_scroll and self.at_end
        new = [_shown(part) for line in lines for part in line.splitlines() or [""]]  # an empty line stays
        if not new:
            return self
        self._lines.extend(new)
        self._widest = max(self._widest, max(map(_width, new)))
        excess = len(self._lines) - self.max_lines if self.max_lines is not None else 0
        if excess > 0:
            del self._lines[:excess]
            self._dropped += excess
            self.view_y = max(0, self.view_y - excess)  # the same lines stay in view
        if follow:
            self.view_y = self.max_view_y
        self.refresh()
        return self

    def clear(self) -> LogView:
        self._lines.clear()
        self._segments.clear()
        self._widest = 0
        self.view_y = self.view_x = 0
        self.refresh()
        return self

    def scroll_to_line(self, y: int) -> None:
        """Show line ``y`` (an index into ``lines``) at the top, or as near as the end allows."""
        y = min(max(0, y), self.max_view_y)
        if y != self.view_y:
            self.view_y = y
            self.refresh()

    def scroll_end(self, *_, **__) -> None:
        """The newest line in view (``Widget.scroll_end``'s arguments are accepted and have no use here)."""
        self.scroll_to_line(self.max_view_y)

    def scroll_home(self, *_, **__) -> None:
        self.scroll_to_line(0)

    def action_scroll_lines(self, lines: int) -> None:
        self.scroll_to_line(self.view_y + lines)

    def action_scroll_pages(self, pages: int) -> None:
        self.scroll_to_line(self.view_y + pages * max(1, self.size.height - 1))

    def action_scroll_home(self) -> None:
        self.scroll_home()

    def action_scroll_end(self) -> None:
        self.scroll_end()

    def action_scroll_side(self, steps: int) -> None:
        x = min(max(0, self.view_x + steps * SIDE_STEP), self.max_view_x)
        if x != self.view_x:
            self.view_x = x
            self.refresh()

    def _on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if not self.at_end:  # at the end the wheel scrolls what holds the pane
            event.stop()
            self.scroll_to_line(self.view_y + WHEEL_LINES)

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if self.view_y > 0:
            event.stop()
            self.scroll_to_line(self.view_y - WHEEL_LINES)

    def _on_click(self, event: events.Click) -> None:
        """A click in the scrollbar's column shows that part of the log."""
        at = event.get_content_offset(self)  # inside any border (a node's pane has one)
        if at is not None and at.x == self.size.width - 1 and self.size.height > 1 and self.max_view_y:
            self.scroll_to_line(round(self.max_view_y * at.y / (self.size.height - 1)))

    def on_resize(self) -> None:
        self.view_y = min(self.view_y, self.max_view_y)
        self.view_x = min(self.view_x, self.max_view_x)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = None
        self._segments.clear()

    @property
    def allow_select(self) -> bool:
        return True

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The selected text; a selection's line numbers count dropped lines too."""
        def kept(offset):
            return None if offset is None else offset._replace(y=max(0, offset.y - self._dropped))

        return Selection(kept(selection.start), kept(selection.end)).extract("\n".join(self._lines)), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        self._pass = self._drawing()
        try:
            return super().render_lines(crop)
        finally:
            self._pass = None

    def render_line(self, y: int) -> Strip:
        width, first, selection, (text_style, track, thumb, chosen), bar = self._pass or self._drawing()
        index = first + y
        if index < len(self._lines):
            segments = self._line_segments(index, width, text_style, chosen, selection)
        else:
            segments = [Segment(" " * width, text_style)]
        if bar is None:  # every line fits: no scrollbar to draw
            return Strip([*segments, Segment(" ", text_style)], width + 1)
        return Strip([*segments, thumb if bar[0] <= y < bar[1] else track], width + 1)

    def _drawing(self) -> tuple:
        """What every line of one drawing shares (Textual asks for the lines one at a time)."""
        height, total = self.size.height, len(self._lines)
        if total <= height or height <= 0:
            bar = None  # every line fits
        else:
            size = max(1, round(height * height / total))
            top = round((height - size) * self.view_y / max(1, total - height))
            bar = (top, top + size)
        width = self.text_width
        styles = self._line_styles()
        drawn_for = (width, self.view_x, styles[0])
        if self._drawn_for != drawn_for:
            self._drawn_for = drawn_for
            self._segments.clear()
        return width, self.view_y, self.text_selection, styles, bar

    def _line_styles(self) -> tuple[Style, Segment, Segment, Style]:
        """The text's style, the scrollbar's track and thumb cells, a selection's style: looked up once per
        style change (the focus tints the background, a theme changes every colour)."""
        if self._styles is None:
            styles = self.styles
            _, background = self.background_colors
            track = background + styles.scrollbar_background
            thumb = track + styles.scrollbar_color
            self._styles = (self.rich_style, Segment(" ", Style(bgcolor=track.rich_color)),
                            Segment(" ", Style(bgcolor=thumb.rich_color)),
                            self.screen.get_component_rich_style("screen--selection"))
        return self._styles

    def _line_segments(self, index: int, width: int, style: Style, chosen: Style,
                       selection: Selection | None) -> list[Segment]:
        number = self._dropped + index
        span = selection.get_span(number) if selection is not None else None
        if span is None and (cached := self._segments.get(number)) is not None:
            return cached
        line = self._lines[index]
        if span is None:
            segments = [Segment(line, style)]
        else:
            start, end = span
            end = len(line) if end == -1 else end
            segments = [Segment(line[:start], style), Segment(line[start:end], style + chosen),
                        Segment(line[end:], style)]
        x, cells = self.view_x, _width(line)
        cut = cells > x + width > 0  # the line goes on past the right edge: its last cell says so
        strip = Strip(segments, cells).crop_extend(x, x + width - cut, style)
        drawn = list(strip.apply_offsets(x, number))
        if cut:
            drawn.append(Segment(CUT_MARK, style + CUT_STYLE))
        if span is None:
            if len(self._segments) >= CACHED_LINES:
                self._segments.clear()
            self._segments[number] = drawn
        return drawn
