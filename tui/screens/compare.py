"""Two runs side by side: their numbers and the diff of their resolved workloads."""

from __future__ import annotations

import difflib

from rich.syntax import Syntax
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from launcher.runs.view import fmt_duration
from tui.widgets.footer import FitFooter


class CompareScreen(Screen):
    DEFAULT_CSS = """
    CompareScreen DataTable { height: auto; max-height: 12; }
    CompareScreen VerticalScroll { height: 1fr; border: round $panel; }
    """
    BINDINGS = [Binding("escape", "back", "back")]

    def __init__(self, left: str, right: str) -> None:
        super().__init__()
        self.left, self.right = left, right

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(cursor_type="none")
        with VerticalScroll():
            yield Static("", id="diff")
        yield FitFooter()

    def on_mount(self) -> None:
        from launcher.runs.store import RunStore

        store = RunStore(self.app.home)
        a, b = store.get_run(self.left), store.get_run(self.right)
        table = self.query_one(DataTable)
        table.add_columns("", self.left, self.right)

        def num(v, spec=".4f"):
            return "-" if v is None else format(v, spec)

        rows = [
            ("experiment", a.summary.experiment, b.summary.experiment),
            ("state", a.summary.state.value, b.summary.state.value),
            ("nodes", str(a.summary.num_nodes), str(b.summary.num_nodes)),
            ("step", f"{a.summary.step}/{a.summary.max_steps}", f"{b.summary.step}/{b.summary.max_steps}"),
            ("last loss", num(a.summary.last_loss), num(b.summary.last_loss)),
            ("best eval loss", num(a.summary.best_eval_loss), num(b.summary.best_eval_loss)),
            ("duration", fmt_duration(a.summary.duration_s), fmt_duration(b.summary.duration_s)),
        ]
        for row in rows:
            table.add_row(*row)
        left = (a.directory / "workload.yaml").read_text().splitlines()
        right = (b.directory / "workload.yaml").read_text().splitlines()
        diff = "\n".join(difflib.unified_diff(left, right, self.left, self.right, lineterm=""))
        self.diff_text = diff or "(same workload)"
        self.query_one("#diff", Static).update(Syntax(self.diff_text, "diff"))

    def action_back(self) -> None:
        self.app.pop_screen()
