"""Every rank's step time over recent steps, as a heatmap: each cell is the rank's own work at that step
against the median rank's; a chronically slow rank's row is marked. The figures and the flag come from
:mod:`launcher.runs.read.ranks`; this screen only reads the run's metrics as they grow and draws them."""

from __future__ import annotations

from rich.text import Text
from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Label

from launcher.api.runs import THRESHOLD, RankReport, RankTimes
from tui.app_base import AppBase
from tui.messages import RankTimesRead
from tui.screens.from_worker import unless_taken_apart
from tui.widgets.footer import FitFooter
from tui.widgets.header import Header

REFRESH_S = 2.0
COLUMNS = 12
"""Recent records shown, one column each (the flag itself looks over its own window of steps)."""


class RanksScreen(Screen):
    app = getters.app(AppBase)
    DEFAULT_CSS = """
    RanksScreen #ranks-said { height: auto; max-height: 6; padding: 0 1; background: $panel; }
    """
    BINDINGS = [Binding("escape", "back", "back")]

    def __init__(self, run_id: str, num_nodes: int) -> None:
        super().__init__()
        self.run_id = run_id
        self.times = RankTimes(num_nodes)
        self.read_to = 0
        """How far the run's metrics file has been read (only new lines are read at each refresh)."""
        self.drawn = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("reading the run's metrics ...", id="ranks-said", markup=False)
        yield DataTable(cursor_type="row", zebra_stripes=True)
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = f"step time per rank: {self.run_id}"
        self.load()
        self.set_interval(REFRESH_S, self.load)

    def action_back(self) -> None:
        self.app.pop_screen()

    @work(thread=True, exclusive=True, group="rank-times")
    def load(self) -> None:
        """New metrics lines, read off the event loop; the report is drawn on it."""
        from launcher.api.runs import RunNotFound

        try:
            records, self.read_to = self.app.client.runs.metrics_since(self.run_id, self.read_to)
        except RunNotFound:
            return
        added = False
        for record in records:
            added = self.times.add(record) or added
        if added or not self.drawn:
            self.drawn = True
            self.post_message(RankTimesRead(self.times.report(COLUMNS)))

    @on(RankTimesRead)
    def _rank_times_read(self, message: RankTimesRead) -> None:
        with unless_taken_apart(self):
            self.draw(message.report)

    def draw(self, report: RankReport) -> None:
        self.query_one("#ranks-said", Label).update(
            f"{report.says}\neach cell: the rank's own work at that step against the median rank's; "
            f"slow = over +{THRESHOLD:.0%} in most of the last steps (docs/ranks.md)")
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns("", "rank", "node", "last", *(str(s) for s in report.steps))
        for row in report.rows:
            cells = [_cell(x) for x in row.ratios]
            table.add_row(Text("SLOW", style="bold red") if row.slow else "", str(row.rank),
                          "-" if row.node is None else str(row.node),
                          "-" if row.last_s is None else f"{row.last_s * 1000:.1f} ms", *cells,
                          key=str(row.rank))


def _cell(ratio: float | None) -> Text:
    if ratio is None:
        return Text("-", style="dim")
    style = "bold white on red" if ratio > 1 + THRESHOLD else ("yellow" if ratio > 1.05 else "dim")
    return Text(f"{ratio - 1:+.0%}", style=style)
