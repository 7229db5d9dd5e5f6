"""A sweep (or any marked runs) side by side: one row per variant with its measured numbers, the loss
curves overlaid, throughput and peak memory as bars; for marked runs, the workload diffs too. The
numbers come from :mod:`launcher.runs.read.comparison`; this screen only shows them."""

from __future__ import annotations

import difflib

from rich.syntax import Syntax
from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Label, Static, TabbedContent, TabPane

from launcher.api.runs import RunStats
from launcher.words import plural
from tui.app_base import AppBase
from tui.messages import ComparisonRead, RunChosen
from tui.screens.from_worker import unless_taken_apart
from tui.widgets.comparison_plots import LossCurves, MetricBars
from tui.widgets.comparison_table import ComparisonTable
from tui.widgets.footer import FitFooter
from tui.widgets.header import Header

REFRESH_S = 2.0


def workload_diffs(texts: dict[str, str]) -> str:
    """Each run's resolved workload against the first one's (unified diffs, one after the other)."""
    ids = list(texts)
    if len(ids) < 2:
        return "(one run)"
    first = texts[ids[0]].splitlines()
    parts = []
    for other in ids[1:]:
        diff = "\n".join(difflib.unified_diff(first, texts[other].splitlines(), ids[0], other, lineterm=""))
        parts.append(diff or f"--- {ids[0]}\n+++ {other}\n(same workload)")
    return "\n\n".join(parts)


class SweepScreen(Screen):
    """``SweepScreen(sweep_id=...)`` follows a sweep until it ends; ``SweepScreen(run_ids=[...])``
    compares any runs (with their workload diffs)."""

    app = getters.app(AppBase)

    DEFAULT_CSS = """
    SweepScreen #sweep-title { padding: 0 1; background: $panel; width: 100%; height: 1; text-style: bold; }
    SweepScreen #row-detail { padding: 0 1; height: auto; max-height: 3; color: $text-muted; }
    SweepScreen TabbedContent { height: 1fr; }
    SweepScreen TabPane { padding: 0; }
    SweepScreen PlotextPlot { height: 1fr; }
    """
    BINDINGS = [
        Binding("escape", "back", "back"),
        Binding("s", "sort", "sort", tooltip="sort by the next column (S: reverse)"),
        Binding("S", "reverse_sort", "reverse", show=False),
        Binding("enter", "open", "open run"),
        Binding("x", "cancel", "cancel sweep", tooltip="cancel the live variants and skip the rest"),
        Binding("1", "tab('table')", "table", show=False),
        Binding("2", "tab('loss')", "loss", show=False),
        Binding("3", "tab('throughput')", "tok/s", show=False),
        Binding("4", "tab('memory')", "memory", show=False),
        Binding("5", "tab('diff')", "diff", show=False),
    ]

    def __init__(self, *, sweep_id: str | None = None, run_ids: list[str] | None = None) -> None:
        super().__init__()
        self.sweep_id, self.run_ids = sweep_id, list(run_ids or [])
        self.rows: list[RunStats] = []
        self.state = ""
        self.detail = ""
        self.loaded = 0
        """How many times the numbers were (re)loaded: what tests wait for."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("", id="sweep-title")
        with TabbedContent(initial="table"):
            with TabPane("1 table", id="table"):
                yield ComparisonTable(run_ids=not self.sweep_id, id="variants")
                yield Label("", id="row-detail")
            with TabPane("2 loss", id="loss"):
                yield LossCurves(id="loss-plot")
            with TabPane("3 tok/s", id="throughput"):
                yield MetricBars("tokens_per_s", "tokens/s (mean over steps)", id="tps-plot")
            with TabPane("4 memory", id="memory"):
                yield MetricBars("peak_gib", "peak memory per rank, GiB (max over ranks)", id="mem-plot")
            if not self.sweep_id:
                with TabPane("5 diff", id="diff"), VerticalScroll():
                    yield Static("", id="diff-text")
        yield FitFooter()

    @property
    def table(self) -> ComparisonTable:
        return self.query_one(ComparisonTable)

    def on_mount(self) -> None:
        self.reload()
        if self.sweep_id:
            self.set_interval(REFRESH_S, self._refresh_live)

    def _refresh_live(self) -> None:
        if self.state not in ("succeeded", "failed", "cancelled"):
            self.reload()

    @work(thread=True, exclusive=True, group="comparison")
    def reload(self) -> None:
        client = self.app.client
        if self.sweep_id:
            client.sweeps.adopt([self.sweep_id])  # a sweep whose driver died gets a new one
            record = client.sweeps.get(self.sweep_id)
            self.post_message(ComparisonRead(client.sweeps.stats(record), record.state, record.detail, None))
            return
        started = {r: client.runs.record(r).summary.started_at for r in self.run_ids}
        # Marked runs are shown in launch order (as the table's title says), whatever order they were marked in.
        self.run_ids.sort(key=lambda r: (started[r] is None, started[r] or 0, r))
        texts = {r: client.runs.workload_text(r) for r in self.run_ids}
        self.post_message(ComparisonRead(client.runs.compare(self.run_ids), "", "", workload_diffs(texts)))

    @on(ComparisonRead)
    def _comparison_read(self, message: ComparisonRead) -> None:
        with unless_taken_apart(self):
            self._show(message.rows, message.state, message.detail, message.diff)

    def _show(self, rows: list[RunStats], state: str, detail: str, diff: str | None) -> None:
        self.rows, self.state, self.detail = rows, state, detail
        with self.app.batch_update():
            self.table.show(rows)
            self.query_one(LossCurves).show(rows)
            for plot in self.query(MetricBars):
                plot.show(rows)
            if diff is not None:
                self.diff_text = diff
                self.query_one("#diff-text", Static).update(Syntax(diff, "diff"))
            self._title()
        self.loaded += 1

    def _title(self) -> None:
        done = sum(r.state == "succeeded" for r in self.rows)
        if self.sweep_id:
            head = f"{self.sweep_id} {self.state}: {done}/{len(self.rows)} succeeded"
        else:
            head = f"{plural(len(self.rows), 'run')} compared"
        self.query_one("#sweep-title", Label).update(f"{head}, sorted {self.table.describe_sort()}")

    def on_data_table_row_highlighted(self, event: ComparisonTable.RowHighlighted) -> None:
        """The highlighted row's run and, for one that failed or was skipped, why in full."""
        row = next((r for r in self.rows if r.run_id == event.row_key.value), None)
        if row is not None:
            why = f": {row.signature}" if row.signature else ""
            self.query_one("#row-detail", Label).update(f"{row.run_id} {row.state}{why}")

    def action_sort(self) -> None:
        self.table.cycle_sort()
        self._title()

    def action_reverse_sort(self) -> None:
        self.table.reverse_sort()
        self._title()

    def action_tab(self, tab: str) -> None:
        if tab == "diff" and self.sweep_id:
            return
        self.query_one(TabbedContent).active = tab

    def action_open(self) -> None:
        table = self.table
        if table.row_count:
            run_id = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            if run_id is not None and any(r.run_id == run_id and r.state not in ("pending", "skipped")
                                          for r in self.rows):
                self.post_message(RunChosen(run_id))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel":
            return bool(self.sweep_id)  # marked runs are no sweep: nothing to cancel, no key in the footer
        if action == "tab" and parameters == ("diff",):
            return not self.sweep_id
        return True

    def action_cancel(self) -> None:
        if not self.sweep_id or self.state in ("succeeded", "failed", "cancelled"):
            return
        from tui.screens.confirm import ConfirmModal

        def done(yes: bool | None) -> None:
            if yes:
                self._cancel()

        self.app.push_screen(ConfirmModal(f"Cancel sweep {self.sweep_id}? Live variants are cancelled, "
                                          "the rest are skipped."), done)

    @work(group="sweep-cancel")
    async def _cancel(self) -> None:
        assert self.sweep_id is not None
        self.notify(f"cancelling sweep {self.sweep_id} ...")
        record = await self.app.client.sweeps.cancel(self.sweep_id)
        self.notify(f"sweep {self.sweep_id}: {record.state}")
        self.reload()

    def action_back(self) -> None:
        self.app.pop_screen()
