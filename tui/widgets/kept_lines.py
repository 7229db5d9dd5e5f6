"""A ``TextArea`` that redraws only the lines an edit changed.

Textual's ``TextArea`` rebuilds its highlight map after every edit and throws away every rendered line
with it, so each key redraws the whole visible text (in a 300-line workload at 160x48, about half of a
key's time). Here an edit that keeps the number of lines keeps the rendered lines of every other row
whose highlights did not change; anything else (a new or deleted line, undo, a new theme, soft wrap)
redraws everything as before. Overlapping highlights are applied in the query's order, every time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import TextArea

if TYPE_CHECKING:
    # Textual does not export EditResult from its public modules: the type of what an edit returns.
    from textual.document._edit import Edit, EditResult  # pyright: ignore[reportPrivateImportUsage]

ROW = 2
"""Where the document row sits in the key of a rendered line (``TextArea.render_line``)."""
END = 1 << 32
"""A highlight that runs to the end of its line ends here."""


class KeptLinesTextArea(TextArea):
    _edited: tuple[int, int, int] | None = None
    """The rows an edit in progress covers, and the line count before it (set while it runs)."""

    def edit(self, edit: Edit) -> EditResult:
        self._edited = (edit.top[0], edit.bottom[0], self.document.line_count)
        try:
            return super().edit(edit)
        finally:
            self._edited = None

    def _build_highlight_map(self) -> None:
        edited = self._edited
        cache = getattr(self, "_line_cache", None)
        if (edited is None or cache is None or not isinstance(getattr(self, "_highlights", None), dict)
                or self.soft_wrap or edited[2] != self.document.line_count):
            super()._build_highlight_map()
            self._order_highlights()
            return
        top, bottom, _ = edited
        before = {row: list(spans) for row, spans in self._highlights.items()}
        rendered = [(key, cache.get(key)) for key in list(cache.keys())]
        super()._build_highlight_map()  # clears the rendered lines
        self._order_highlights()
        after = self._highlights
        for key, line in rendered:
            if line is None or len(key) <= ROW or top <= key[ROW] <= bottom:
                continue
            if before.get(key[ROW], []) != after.get(key[ROW], []):
                continue  # e.g. a quote opened above it: its colours change
            cache.set(key, line)

    def _order_highlights(self) -> None:
        """Put each row's highlights in the query's order (then by column), so that where two overlap
        (a mapping key is a string and a field) the same one wins after every edit: tree-sitter returns
        the captures in an order that can change from one parse to the next."""
        query = getattr(self, "_highlight_query", None)
        if query is None or not isinstance(getattr(self, "_highlights", None), dict):
            return
        rank = {query.capture_name(i): i for i in range(query.capture_count)}
        for spans in self._highlights.values():
            spans.sort(key=lambda span: (rank.get(span[2], -1), span[0], END if span[1] is None else span[1]))
