"""The editor's problems: sorted by line, each wrapped to the pane's width with its hint under it.
Enter jumps to a problem; ``f`` applies its fix where one is mechanical."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from launcher.workload.fixes import Fix
from launcher.workload.problems import Problem


class ProblemsList(OptionList):
    DEFAULT_CSS = """
    ProblemsList { height: 1fr; border: none; }
    ProblemsList:focus { border: none; }
    """
    BINDINGS = [
        Binding("f", "fix", "fix", tooltip="apply the problem's fix (undo reverts it)"),
        Binding("escape", "leave", "back", tooltip="back to the text"),
    ]

    @dataclass
    class Jump(Message):
        line: int
        column: int

    @dataclass
    class FixChosen(Message):
        fix: Fix

    class Leave(Message):
        """Escape: back to the text (a second escape leaves the editor)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.problems: list[Problem] = []
        self.fixes: list[Fix | None] = []

    def show(self, problems: list[Problem], fixes: list[Fix | None]) -> None:
        highlighted = self.highlighted
        self.problems = problems
        self.fixes = fixes
        self.clear_options()
        self.add_options(Option(_prompt(p, f), id=str(i)) for i, (p, f) in enumerate(zip(problems, fixes, strict=True)))
        if problems:
            self.highlighted = min(highlighted or 0, len(problems) - 1)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        p = self.problems[event.option_index]
        if p.file != "--set":
            self.post_message(self.Jump(p.line, p.column))

    def action_leave(self) -> None:
        self.post_message(self.Leave())

    def action_fix(self) -> None:
        if self.highlighted is None or self.highlighted >= len(self.fixes):
            return
        fix = self.fixes[self.highlighted]
        if fix is None:
            self.notify("this one needs your judgement: no mechanical fix", severity="warning")
            return
        self.post_message(self.FixChosen(fix))


def _prompt(p: Problem, fix: Fix | None) -> Text:
    where = f"{p.line}:{p.column}" if p.file != "--set" else f"--set {p.line}"
    style = "bold red" if p.is_error else "bold yellow"
    text = Text.assemble((f"{where} ", "dim"), (p.severity, style), " ")
    if p.path:
        text.append(f"{p.path}: ", "bold")
    text.append(p.message)
    if p.hint:
        text.append("\n")
        text.append(p.hint, "italic")
    if fix is not None:
        text.append("\n")
        text.append(f"f: {fix.title}", "bold green")
    return text
