"""The editor's problems list: sorted by line; selecting one jumps to it."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message
from textual.widgets import DataTable

from launcher.workload.problems import Problem


class ProblemsTable(DataTable):
    DEFAULT_CSS = """
    ProblemsTable { height: 1fr; }
    """

    @dataclass
    class Jump(Message):
        line: int
        column: int

    def on_mount(self) -> None:
        self.cursor_type = "row"
        # The message before the key path: a narrow side panel cuts off the last columns.
        self.add_columns("line", "sev", "message", "key")
        self.problems: list[Problem] = []

    def show(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.clear()
        for i, p in enumerate(problems):
            where = f"{p.line}:{p.column}" if p.file != "--set" else f"--set {p.line}"
            text = p.message + (f" ({p.hint})" if p.hint else "")
            self.add_row(where, p.severity, text, p.path or "-", key=str(i))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        p = self.problems[int(event.row_key.value)]
        if p.file != "--set":
            self.post_message(self.Jump(p.line, p.column))
