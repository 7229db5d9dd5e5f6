"""The runs browser's table: the newest recorded runs (a window of a few hundred, however many are kept),
narrowed by a filter and ordered by any column.

The table is rebuilt from the run summaries on every change (the window's hundreds at most) and
ordered by a key computed from the summary, so numbers sort as numbers and
missing values stay last whichever the direction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable

from launcher.words import fmt_duration, plural

if TYPE_CHECKING:  # the kinds come once the first screen is drawn (home.py): their module with them
    from launcher.api.runs import RunKind, RunSummary

ColumnKey = Literal["id", "experiment", "state", "nodes", "start", "duration", "step", "loss", "eval"]


@dataclass(frozen=True)
class RunColumn:
    key: ColumnKey
    label: str
    numeric: bool = False
    """Numbers are right-aligned and compared as numbers."""


COLUMNS: tuple[RunColumn, ...] = (
    RunColumn("id", "id"),
    RunColumn("experiment", "experiment"),
    RunColumn("state", "state"),
    RunColumn("nodes", "nodes", numeric=True),
    RunColumn("start", "start"),
    RunColumn("duration", "duration", numeric=True),
    RunColumn("step", "step", numeric=True),
    RunColumn("loss", "last loss", numeric=True),
    RunColumn("eval", "best eval", numeric=True),
)
_BY_KEY = {c.key: c for c in COLUMNS}


def sort_value(run: RunSummary, column: ColumnKey) -> str | float | None:
    """What ``column`` sorts ``run`` by: text in lower case, numbers as numbers, ``None`` if unknown."""
    values: dict[str, str | float | None] = {
        "id": run.run_id.lower(),
        "experiment": run.experiment.lower(),
        "state": run.state.value,
        "nodes": run.num_nodes,
        "start": run.started_at,
        "duration": run.duration_s,
        "step": run.step,
        "loss": run.last_loss,
        "eval": run.best_eval_loss,
    }
    return values[column]


def sort_key(run: RunSummary, column: ColumnKey, reverse: bool) -> tuple:
    """Sort key; a reversed sort reverses the whole order, so missing values flip their flag."""
    value = sort_value(run, column)
    missing = value is None
    return (missing != reverse, 0 if missing else value, run.run_id)


def matches(run: RunSummary, text: str, mark: str = "") -> bool:
    """Whether every word of ``text`` occurs (any case) in the run's id, experiment, state or mark."""
    haystack = f"{run.run_id} {run.experiment} {run.state.value} {mark}".lower()
    return all(word in haystack for word in text.lower().split())


def short_id(run_id: str) -> str:
    """What the table shows of an id (its random tail, as k9s and MLflow show short ids): the start
    time and experiment have their own columns, and every command takes the tail or the whole id."""
    return run_id.rsplit("-", 1)[-1] if "-" in run_id else run_id


def row_cells(run: RunSummary, mark: str = "") -> tuple[str | Text, ...]:
    """The shown cells of one run, in ``COLUMNS`` order; ``mark`` (a probe, a nettest, a resume that trained
    nothing) beside its state, dimmed."""
    started = time.strftime("%m-%d %H:%M", time.localtime(run.started_at)) if run.started_at else "-"
    step = f"{run.step or 0}/{run.max_steps}" if run.max_steps else str(run.step or "-")
    if mark == "nettest":
        step = "-"  # it trains nothing: the workload's max_steps is not its own
    loss = f"{run.last_loss:.4f}" if run.last_loss is not None else "-"
    best = f"{run.best_eval_loss:.4f}" if run.best_eval_loss is not None else "-"
    state: str | Text = Text.assemble(run.state.value, (f" · {mark}", "dim")) if mark else run.state.value
    cells = (short_id(run.run_id), run.experiment, state, str(run.num_nodes), started,
             fmt_duration(run.duration_s), step, loss, best)
    return tuple(Text(cell, justify="right") if col.numeric and isinstance(cell, str) else cell
                 for col, cell in zip(COLUMNS, cells, strict=True))


def _width(cell: str | Text) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


@dataclass(frozen=True)
class Window:
    """What the shown runs are a window of: the runs kept (``total``) and, when the store was asked for
    those matching ``matching`` (it keeps more than the window), whether more matched than it holds
    (``full``: the store stopped at the window; an exact count would read every run)."""

    total: int = 0
    matching: str = ""
    full: bool = False


class RunsTable(DataTable):
    """Runs, filtered by :attr:`filter_text` and sorted by :attr:`sort_column` (store order if ``None``)."""

    DEFAULT_CSS = """
    RunsTable { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.runs: list[RunSummary] = []
        self.filter_text = ""
        self.sort_column: ColumnKey | None = None
        self.sort_reverse = False
        self.marked: set[str] = set()
        """Runs marked for a comparison: their id is shown with a dot."""
        self.kinds: dict[str, RunKind] = {}
        """Each run's kind (a probe, a nettest, a resume that trained nothing), shown beside its state."""
        self.window = Window()
        """What :attr:`runs` is a window of (the runs kept, what the store matched)."""
        self._shown_headers: tuple[str | Text, ...] = ()
        self._shown_cells: dict[str, tuple[str | Text, ...]] = {}
        """What the table holds now: its headers, and each row's cells by run id, in the order shown."""

    def set_marked(self, run_ids: set[str]) -> None:
        self.marked = set(run_ids)
        self._rebuild()

    def on_mount(self) -> None:
        self._rebuild()

    @property
    def shown_ids(self) -> list[str]:
        """Run ids in the order they are shown."""
        return [str(row.key.value) for row in self.ordered_rows]

    @property
    def selected_id(self) -> str | None:
        if self.row_count == 0:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def summary(self, run_id: str) -> RunSummary | None:
        return next((r for r in self.runs if r.run_id == run_id), None)

    def show(self, runs: list[RunSummary], window: Window | None = None,
             kinds: dict[str, RunKind] | None = None) -> None:
        self.runs = runs
        self.window = window or Window(len(runs))
        if kinds is not None:
            self.kinds = kinds
        self._rebuild()

    def marks_differ(self, kinds: dict[str, RunKind]) -> bool:
        """Whether ``kinds`` would mark a run of the table otherwise than it is marked now."""
        return any((kinds[r].mark if r in kinds else "") != self.mark_of(r) for r in {*kinds, *self.kinds})

    def mark_of(self, run_id: str) -> str:
        kind = self.kinds.get(run_id)
        return kind.mark if kind is not None else ""

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._rebuild()

    def sort_by(self, column: ColumnKey | None, reverse: bool = False) -> None:
        self.sort_column, self.sort_reverse = column, reverse
        self._rebuild()

    def cycle_sort(self) -> None:
        """Next column, ascending; after the last column, back to store order (newest first)."""
        keys: list[ColumnKey | None] = [*(c.key for c in COLUMNS), None]
        self.sort_by(keys[(keys.index(self.sort_column) + 1) % len(keys)])

    def reverse_sort(self) -> None:
        self.sort_by(self.sort_column or COLUMNS[0].key, not self.sort_reverse)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a header sorts by it; a second click on the same header reverses."""
        column = _BY_KEY[str(event.column_key.value)].key
        self.sort_by(column, column == self.sort_column and not self.sort_reverse)

    def describe(self) -> str:
        """One line for the section title: how many runs are shown and in what order."""
        held, window = len(self.runs), self.window
        if window.total <= held:  # every run kept is here
            shown = f"{self.row_count} of {plural(held, 'run')}" if self.filter_text else plural(held, "run")
            where = f" matching '{self.filter_text}'" if self.filter_text else ""
        elif not self.filter_text:
            shown, where = f"the newest {held:,} of {plural(window.total, 'run')}", ""
        else:  # the store matched the filter over every run kept; the newest of those are here
            full = window.full and window.matching == self.filter_text.strip()
            shown = f"the newest {plural(self.row_count, 'run')}" if full else plural(self.row_count, "run")
            where = f" matching '{self.filter_text}' (of {window.total:,} kept)"
        order = (f"by {_BY_KEY[self.sort_column].label} {'descending' if self.sort_reverse else 'ascending'}"
                 if self.sort_column else "newest first")
        return f"{shown}{where}, {order}"

    def _rebuild(self) -> None:
        """The table as :attr:`runs`, the filter, the sort and the marks make it. When the same runs are shown
        in the same order under the same headers (a live run's duration or step moved), only the cells that
        changed are written: a refresh every 2 s does not measure 500 rows again."""
        headers = self._headers()
        rows = self._rows()
        if headers == self._shown_headers and [key for key, _ in rows] == list(self._shown_cells):
            columns = list(self.columns.values())  # in COLUMNS order
            for key, cells in rows:
                for column, old, cell in zip(columns, self._shown_cells[key], cells, strict=True):
                    if old != cell:  # a column widens for a wider cell; it is not measured again for a narrower
                        wider = _width(cell) > column.content_width
                        self.update_cell(key, column.key, cell, update_width=wider)
                self._shown_cells[key] = cells
            return
        self.rebuild_all(headers, rows)

    def rebuild_all(self, headers: tuple[str | Text, ...] | None = None,
                    rows: list[tuple[str, tuple[str | Text, ...]]] | None = None) -> None:
        """Every column and row cleared and added again (the order, the headers or the runs changed)."""
        headers = self._headers() if headers is None else headers
        rows = self._rows() if rows is None else rows
        keep = self.selected_id
        self.clear(columns=True)
        for col, label in zip(COLUMNS, headers, strict=True):
            self.add_column(label, key=col.key)
        for key, cells in rows:
            self.add_row(*cells, key=key)
        self._shown_headers, self._shown_cells = headers, dict(rows)
        if keep is not None and keep in self.rows:
            self.move_cursor(row=self.get_row_index(keep))

    def _headers(self) -> tuple[str | Text, ...]:
        labels = []
        for col in COLUMNS:
            label = col.label
            if col.key == self.sort_column:
                label += " ▼" if self.sort_reverse else " ▲"
            labels.append(Text(label, justify="right") if col.numeric else label)
        return tuple(labels)

    def _rows(self) -> list[tuple[str, tuple[str | Text, ...]]]:
        """Each shown run's key and cells, in the order shown."""
        shown = [run for run in self.runs if matches(run, self.filter_text, self.mark_of(run.run_id))]
        if self.sort_column is not None:
            column, reverse = self.sort_column, self.sort_reverse
            shown.sort(key=lambda run: sort_key(run, column, reverse), reverse=reverse)
        rows = []
        for run in shown:
            cells = row_cells(run, self.mark_of(run.run_id))
            if run.run_id in self.marked:
                cells = (Text.assemble(("● ", "bold $accent"), cells[0]), *cells[1:])
            rows.append((run.run_id, cells))
        return rows
