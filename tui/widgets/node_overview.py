"""Every node of a run as one table row (the monitor's overview past the nodes whose panes fit): sort by
any column, filter by text or to the odd nodes, ``enter`` opens a node's log. It renders the rows that
:func:`launcher.runs.read.nodes.node_rows` computes; it changes only the cells whose text changed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Label

from launcher.runs.read.nodes import NodeRow


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


@dataclass(frozen=True)
class Column:
    title: str
    text: Callable[[NodeRow], str]
    order: Callable[[NodeRow], object]
    """What the column sorts by (numbers as numbers; a missing figure sorts last either way)."""


COLUMNS: tuple[Column, ...] = (
    Column("node", lambda r: str(r.node), lambda r: r.node),
    Column("host", lambda r: r.host, lambda r: r.host),
    Column("state", lambda r: r.state, lambda r: r.state),
    Column("exit", lambda r: _num(r.exit_code, "{}"), lambda r: r.exit_code),
    Column("lines", lambda r: f"{r.lines:,}", lambda r: r.lines),
    Column("lines/s", lambda r: f"{r.lines_per_s:,.1f}", lambda r: r.lines_per_s),
    Column("quiet", lambda r: _num(r.last_output_age_s, "{:.0f} s"), lambda r: r.last_output_age_s),
    Column("CPU%", lambda r: _num(r.cpu_pct, "{:.0f}"), lambda r: r.cpu_pct),
    Column("RSS MiB", lambda r: _num(r.rss_mib, "{:,.0f}"), lambda r: r.rss_mib),
    Column("GPU%", lambda r: _num(r.gpu_util_pct, "{:.0f}"), lambda r: r.gpu_util_pct),
    Column("GPU GiB", lambda r: _num(r.gpu_mem_used_gib, "{:.1f}"), lambda r: r.gpu_mem_used_gib),
    Column("step", lambda r: _num(r.step, "{}"), lambda r: r.step),
    Column("step s", lambda r: _num(r.step_s, "{:.3f}"), lambda r: r.step_s),
    Column("odd", lambda r: "; ".join(m.says for m in r.odd), lambda r: len(r.odd)),
)
ODD_STYLE = "bold red"


def sorted_rows(rows: list[NodeRow], column: int, reverse: bool) -> list[NodeRow]:
    """By ``column``, ties by node (ascending either way); a missing figure (``-``) last whichever way."""
    order = COLUMNS[column].order
    known = [r for r in rows if order(r) is not None]
    missing = [r for r in rows if order(r) is None]
    known.sort(key=lambda r: r.node)
    known.sort(key=order, reverse=reverse)  # stable: equal figures stay by node either way
    return known + sorted(missing, key=lambda r: r.node)


def wanted(row: NodeRow, text: str, odd_only: bool) -> bool:
    if odd_only and not row.odd:
        return False
    if not text:
        return True
    hay = f"{row.node} {row.host} {row.state} " + " ".join(f"{m.what} {m.says}" for m in row.odd)
    return text.lower() in hay.lower()


class RowTable(DataTable):
    """A ``DataTable`` that re-renders a cell only when what it shows changed.

    ``DataTable`` drops every rendered cell whenever any cell changes (its caches are keyed by an update
    counter), so each 2 Hz update of a few figures re-rendered all visible cells of all rows: at 64 nodes
    that took tens of milliseconds a frame, and keys waited behind it. Here a row's line and each cell's
    lines are also kept
    by its text, style, place, width, highlight, focus and theme; an unchanged cell is reused (cells are
    plain ``Text`` with one style, as :class:`NodeOverview` writes them). Focus moving in or out (each
    time the overview is shown) restyles the table, which drops DataTable's caches but not these.
    """

    KEPT_CELLS = 8_000
    """Rendered cells kept (64 rows x 13 columns, a few highlight states each); past it they start over."""
    KEPT_LINES = 1_000
    """Rendered lines kept, likewise (one per row and highlight state)."""

    def __init__(self, **kwargs) -> None:
        self._kept_cells: dict[tuple, list] = {}  # before DataTable's init, which clears caches
        self._kept_lines: dict[tuple, object] = {}
        super().__init__(**kwargs)

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False):
        if row_index < 0 or column_index < 0:  # the header: as DataTable draws it
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        cell = self._cell_at(row_index, column_index)
        key = (row_index, column_index, cell.plain, str(cell.style), width, self.cell_padding, base_style,
               cursor, hover, self.show_cursor, self._show_hover_cursor, self._pseudo_class_state,
               self.app.theme)
        lines = self._kept_cells.get(key)
        if lines is None:
            if len(self._kept_cells) >= self.KEPT_CELLS:
                self._kept_cells.clear()
            lines = self._kept_cells[key] = super()._render_cell(row_index, column_index, base_style, width,
                                                                 cursor, hover)
        return lines

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style):
        """A table line, kept by what its row shows (DataTable keeps lines only until any cell changes)."""
        if self.show_header and y < self.header_height:
            return super()._render_line(y, x1, x2, base_style)
        try:
            row_key, line_no = self._get_offsets(y)
        except LookupError:
            return super()._render_line(y, x1, x2, base_style)
        row_index = self._row_locations.get(row_key)
        cursor, hover = self.cursor_coordinate.row == row_index, self.hover_coordinate.row == row_index
        key = (row_index, line_no, tuple((c.plain, str(c.style)) for c in self._data[row_key].values()),
               tuple(c.get_render_width(self) for c in self.ordered_columns), x1, x2, self.size.width,
               base_style, cursor, hover, self.cursor_type, self.show_cursor, self._show_hover_cursor,
               self.zebra_stripes, self._pseudo_class_state, self.app.theme)
        strip = self._kept_lines.get(key)
        if strip is None:
            if len(self._kept_lines) >= self.KEPT_LINES:
                self._kept_lines.clear()
            strip = self._kept_lines[key] = super()._render_line(y, x1, x2, base_style)
        return strip

    def _cell_at(self, row_index: int, column_index: int) -> Text:
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        return self._data[row_key][column_key]

    def _clear_caches(self) -> None:
        self._kept_cells.clear()
        self._kept_lines.clear()
        super()._clear_caches()


class NodeOverview(Vertical):
    """The table and a line saying how it is sorted and filtered. ``show(rows)`` on the draw timer."""

    DEFAULT_CSS = """
    NodeOverview { height: 1fr; }
    NodeOverview #overview-says { height: 1; padding: 0 1; background: $panel; }
    NodeOverview DataTable { height: 1fr; }
    """
    BINDINGS = [
        Binding("n", "sort_next", "sort", tooltip="Sort by the next column (click a title: by that one)"),
        Binding("v", "reverse", "reverse", tooltip="Reverse the order"),
        Binding("x", "odd_only", "odd only", tooltip="Show only the nodes marked odd, or every node"),
    ]

    @dataclass
    class NodeChosen(Message):
        """``enter`` on a node's row: its log is wanted."""

        node_rank: int

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: list[NodeRow] = []
        self.sort_column = 0
        self.reverse = False
        self.filter_text = ""
        self.odd_only = False
        self.shown: dict[int, tuple[str, ...]] = {}
        """Each shown row's cell texts, by node rank (only the ones that change are written)."""
        self.order: list[int] = []

    def compose(self) -> ComposeResult:
        yield Label("", id="overview-says")
        table = RowTable(cursor_type="row", zebra_stripes=True)
        for i, column in enumerate(COLUMNS):
            table.add_column(column.title, key=str(i))
        yield table

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def show(self, rows: list[NodeRow]) -> None:
        """Draw these rows (sorted and filtered as asked); a no-op for cells that read the same."""
        self.rows = rows
        picked = sorted_rows([r for r in rows if wanted(r, self.filter_text, self.odd_only)],
                             self.sort_column, self.reverse)
        cells = {r.node: tuple(c.text(r) for c in COLUMNS) for r in picked}
        odd = {r.node for r in picked if r.odd}
        table = self.table
        order = [r.node for r in picked]
        if order != self.order:
            chosen = self.chosen_node()
            table.clear()
            for node in order:
                table.add_row(*self._styled(cells[node], node in odd), key=str(node))
            self.order, self.shown = order, cells
            if chosen in order:
                table.move_cursor(row=order.index(chosen), animate=False)
        else:
            for node, texts in cells.items():
                before = self.shown.get(node)
                if before == texts:
                    continue
                styled = self._styled(texts, node in odd)
                for i, text in enumerate(texts):
                    if before is None or before[i] != text or i < 2:
                        table.update_cell(str(node), str(i), styled[i])
                self.shown[node] = texts
        self._say(len(rows), len(picked), sum(1 for r in rows if r.odd))

    @staticmethod
    def _styled(texts: tuple[str, ...], odd: bool) -> list[Text]:
        style = ODD_STYLE if odd else ""
        last = len(texts) - 1
        return [Text(t, style=style if i in (0, 1, last) else "") for i, t in enumerate(texts)]

    def _say(self, total: int, shown: int, odd: int) -> None:
        arrow = "descending" if self.reverse else "ascending"
        parts = [f"{total} nodes", f"{odd} odd" if odd else "none odd",
                 f"sorted by {COLUMNS[self.sort_column].title} {arrow} (n: next column, v: reverse)"]
        if self.filter_text or self.odd_only:
            what = " and ".join(p for p in (f"'{self.filter_text}'" if self.filter_text else "",
                                            "odd only" if self.odd_only else "") if p)
            parts.append(f"showing {shown} ({what})")
        parts.append("x: odd only  enter: its log  o: panes")
        self.query_one("#overview-says", Label).update(Text("  ·  ".join(parts)))

    def chosen_node(self) -> int | None:
        table = self.table
        if not self.order or not table.is_valid_row_index(table.cursor_row):
            return None
        return self.order[table.cursor_row]

    def _redraw(self) -> None:
        self.order = []  # a new order or filter: rebuild the rows
        self.show(self.rows)

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._redraw()

    def action_sort_next(self) -> None:
        self.sort_column = (self.sort_column + 1) % len(COLUMNS)
        self._redraw()

    def sort_by(self, title: str, reverse: bool = False) -> None:
        self.sort_column = [c.title for c in COLUMNS].index(title)
        self.reverse = reverse
        self._redraw()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._redraw()

    def action_odd_only(self) -> None:
        self.odd_only = not self.odd_only
        self._redraw()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.NodeChosen(int(event.row_key.value)))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column's title sorts by it (again: the other way)."""
        event.stop()
        column = int(event.column_key.value)
        self.reverse = not self.reverse if column == self.sort_column else False
        self.sort_column = column
        self._redraw()
