"""Every node of a run as one table row (the monitor's overview past the nodes whose panes fit): sort by
any column, filter by text or to the odd nodes, ``enter`` opens a node's log. It renders the rows that
:func:`launcher.runs.read.nodes.node_rows` computes; it changes only the cells whose text changed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Label

from launcher.api.runs import NodeRow
from launcher.words import plural
from tui.widgets.row_table import RowTable


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


@dataclass(frozen=True)
class Column:
    title: str
    text: Callable[[NodeRow], str]
    order: Callable[[NodeRow], Any]
    """What the column sorts by (numbers as numbers; a missing figure sorts last either way)."""


COLUMNS: tuple[Column, ...] = (
    Column("node", lambda r: str(r.node), lambda r: r.node),
    Column("host", lambda r: f"{r.host} ({r.swapped_in})" if r.swapped_in else r.host, lambda r: r.host),
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


class NodeOverview(Vertical):
    """The table and a line saying how it is sorted and filtered. ``show(rows)`` on the draw timer."""

    DEFAULT_CSS = """
    NodeOverview { height: 1fr; }
    NodeOverview #overview-says { height: 1; width: 1fr; padding: 0 1; background: $panel; }
    NodeOverview DataTable { height: 1fr; }
    NodeOverview DataTable:focus { background-tint: 0%; }  /* the cursor shows the focus: rows stay drawn */
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
        self.says = ""

    def compose(self) -> ComposeResult:
        yield Label("", id="overview-says")
        table = RowTable(cursor_type="row", zebra_stripes=True)
        for i, column in enumerate(COLUMNS):
            table.add_column(column.title, key=str(i))
        yield table

    @property
    def table(self) -> RowTable:
        return self.query_one(RowTable)

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
            columns = table.ordered_columns
            changes: dict[str, dict[str, object]] = {}
            wider: set[tuple[str, str]] = set()
            for node, texts in cells.items():
                before = self.shown.get(node)
                if before == texts:
                    continue
                styled = self._styled(texts, node in odd)
                # The node and host cells always: their style says whether the node is odd.
                changed = [i for i, text in enumerate(texts) if before is None or before[i] != text or i < 2]
                changes[str(node)] = {str(i): styled[i] for i in changed}
                # DataTable measures an updated cell only when asked (then a narrower one measures the
                # whole column): ask when the text is wider than its column.
                wider.update((str(node), str(i)) for i in changed if len(texts[i]) > columns[i].content_width)
                self.shown[node] = texts
            table.update_rows(changes, widen=wider)
        self._say(len(rows), len(picked), sum(1 for r in rows if r.odd))

    @staticmethod
    def _styled(texts: tuple[str, ...], odd: bool) -> list[Text]:
        style = ODD_STYLE if odd else ""
        last = len(texts) - 1
        return [Text(t, style=style if i in (0, 1, last) else "") for i, t in enumerate(texts)]

    def _say(self, total: int, shown: int, odd: int) -> None:
        arrow = "descending" if self.reverse else "ascending"
        parts = [plural(total, "node"), f"{odd} odd" if odd else "none odd",
                 f"sorted by {COLUMNS[self.sort_column].title} {arrow} (n: next column, v: reverse)"]
        if self.filter_text or self.odd_only:
            what = " and ".join(p for p in (f"'{self.filter_text}'" if self.filter_text else "",
                                            "odd only" if self.odd_only else "") if p)
            parts.append(f"showing {shown} ({what})")
        parts.append("x: odd only  enter: its log  o: panes")
        says = "  ·  ".join(parts)
        if says != self.says:  # a fixed size: a repaint, no layout, and only when it reads differently
            self.says = says
            self.query_one("#overview-says", Label).update(Text(says), layout=False)

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
        node = event.row_key.value
        if node is not None:  # every row is keyed by its node
            self.post_message(self.NodeChosen(int(node)))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column's title sorts by it (again: the other way)."""
        event.stop()
        if event.column_key.value is None:  # every column is keyed by its index
            return
        column = int(event.column_key.value)
        self.reverse = not self.reverse if column == self.sort_column else False
        self.sort_column = column
        self._redraw()
