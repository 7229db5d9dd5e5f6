"""One row per run of a comparison (a sweep's variants, or marked runs): state, varied values and
measured numbers, sortable by any column, with inline bars in the throughput and memory columns."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from launcher.api.runs import RunStats
from launcher.present.comparison import COLUMNS, Column, fmt

BAR_WIDTH = 6
_EIGHTHS = " ▏▎▍▌▋▊▉█"
_STATE_STYLE = {"succeeded": "green", "failed": "red", "timed_out": "red", "cancelled": "yellow",
                "skipped": "dim", "running": "cyan", "pending": "dim"}
_TABLE_COLUMNS = tuple(c for c in COLUMNS if c.key not in ("run_id",))
"""A sweep's variants are told apart by what they vary (the highlighted row's run id is said below)."""


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """A left-aligned bar of ``width`` cells filled to ``fraction`` (eighths of a cell)."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(width)


def sort_key(stats: RunStats, key: str, reverse: bool) -> tuple:
    """Missing values last whichever the direction; text compared in lower case."""
    value = getattr(stats, key)
    missing = value is None or value == ""
    if isinstance(value, str):
        value = value.lower()
    return (missing != reverse, 0 if missing else value, stats.run_id)


class ComparisonTable(DataTable):
    """``show(rows)`` redraws; ``cycle_sort()`` orders by the next numeric column."""

    DEFAULT_CSS = "ComparisonTable { height: auto; max-height: 100%; }"

    def __init__(self, *, run_ids: bool = False, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.table_columns = COLUMNS if run_ids else _TABLE_COLUMNS
        """Marked runs compared show their ids: they share no sweep, and may vary nothing."""
        self.rows_shown: list[RunStats] = []
        self.sort_by: str | None = None
        self.reverse = False
        self.columns_shown: list[Column] = []

    def show(self, rows: list[RunStats]) -> None:
        self.rows_shown = list(rows)
        self._redraw()

    def cycle_sort(self) -> None:
        keys = [c.key for c in self.columns_shown if c.spec or c.key in ("label", "state")]
        if not keys:
            return
        self.sort_by = keys[(keys.index(self.sort_by) + 1) % len(keys)] if self.sort_by in keys else keys[0]
        self._redraw()

    def reverse_sort(self) -> None:
        self.reverse = not self.reverse
        self._redraw()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        key = str(event.column_key.value)
        self.reverse = not self.reverse if self.sort_by == key else False
        self.sort_by = key
        self._redraw()

    def describe_sort(self) -> str:
        if self.sort_by is None:
            return "in launch order"
        label = next((c.label for c in self.columns_shown if c.key == self.sort_by), self.sort_by)
        return f"by {label}" + (" (reversed)" if self.reverse else "")

    def _redraw(self) -> None:
        rows = self.rows_shown
        columns = [c for c in self.table_columns if any(getattr(r, c.key) not in (None, "") for r in rows)
                   or c.key in ("label", "state")]
        by = self.sort_by
        if by is not None:
            rows = sorted(rows, key=lambda r: sort_key(r, by, self.reverse), reverse=self.reverse)
        cursor = self.cursor_row
        self.clear(columns=columns != self.columns_shown)
        if columns != self.columns_shown or not self.columns:
            self.columns_shown = columns
            for c in columns:
                self.add_column(self._label(c), key=c.key)
        tops = {c.key: max((getattr(r, c.key) or 0) for r in rows) if rows else 0 for c in columns if c.bars}
        for r in rows:
            self.add_row(*(self._cell(r, c, tops.get(c.key)) for c in columns), key=r.run_id)
        if rows:
            self.move_cursor(row=min(cursor, len(rows) - 1))

    def _label(self, c: Column) -> Text:
        return Text(c.label, justify="right" if c.spec else "left")

    @staticmethod
    def _cell(r: RunStats, c: Column, top: float | None) -> Text:
        value = getattr(r, c.key)
        text = fmt(value, c.spec)
        if c.key == "state":
            return Text(text, style=_STATE_STYLE.get(text, ""))
        if c.key == "signature":
            return Text(text[:60], style="red")
        if c.bars:
            fill = bar(value / top) if value is not None and top else " " * BAR_WIDTH
            return Text.assemble((fill, "cyan"), " ", text)
        return Text(text, justify="right" if c.spec else "left")
