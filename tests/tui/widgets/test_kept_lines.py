"""The text area that keeps unchanged rendered lines across an edit draws exactly what a full redraw
draws: after every edit below, each visible line as shown equals the line rendered from scratch."""

from __future__ import annotations

from textual.app import App, ComposeResult

from tui.widgets.kept_lines import KeptLinesTextArea

TEXT = "".join(f"key_{i}: value {i}  # note {i}\n" for i in range(60))


class OneArea(App):
    def compose(self) -> ComposeResult:
        yield KeptLinesTextArea.code_editor(TEXT, language="yaml")


def _shown_and_fresh(area: KeptLinesTextArea) -> tuple[list, list]:
    shown = [list(area.render_line(y)) for y in range(area.size.height)]
    area._line_cache.clear()
    fresh = [list(area.render_line(y)) for y in range(area.size.height)]
    return shown, fresh


async def test_each_edit_draws_what_a_full_redraw_draws():
    app = OneArea()
    async with app.run_test(size=(80, 30)) as pilot:
        area = app.query_one(KeptLinesTextArea)
        area.focus()
        area.cursor_location = (5, 0)
        await pilot.pause()
        assert len(area._line_cache) >= area.size.height  # every visible row drawn once
        area.insert("x")  # an edit, before the next frame: every other row's line is kept
        assert len(area._line_cache) >= area.size.height - 1
        await pilot.pause()
        edits = [
            ("y",),  # a plain character: only its row changes
            ("space", "q", "u", "o", "t", "e", "colon", "space", "quotation_mark"),  # an open string
            ("a", "b", "quotation_mark"),  # the string closed again: the rows after it change back
            ("number_sign", "space", "c"),  # a comment
            ("enter", "n", "e", "w", "colon", "space", "1"),  # a new line: everything below moves
            ("backspace", "backspace", "ctrl+z"),  # deletions, then an undo
            ("up", "up", "end", "z", "ctrl+z", "ctrl+y"),  # another row, undo and redo
        ]
        for keys in edits:
            for key in keys:
                await pilot.press(key)
                shown, fresh = _shown_and_fresh(area)
                assert shown == fresh, f"after {key!r} in {keys}"
