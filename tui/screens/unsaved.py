"""Leaving text that was never saved: save it, discard it, or stay. Dismisses with the choice."""

from __future__ import annotations

from typing import Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

Choice = Literal["save", "discard", "stay"]


class UnsavedModal(ModalScreen[Choice]):
    DEFAULT_CSS = """
    UnsavedModal { align: center middle; }
    UnsavedModal > Vertical { width: 70%; max-width: 100; min-width: 40; height: auto; border: thick $warning;
                              background: $surface; padding: 1 2; }
    UnsavedModal .question { width: 100%; height: auto; }
    UnsavedModal Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    UnsavedModal Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("s", "choose('save')", "save"),
        Binding("d", "choose('discard')", "discard"),
        Binding("escape", "choose('stay')", "stay"),
    ]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.file_name = name

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"{self.file_name} has changes that are not saved. Save them (s), discard them (d), "
                         "or stay in the editor (escape)?", classes="question", markup=False)
            with Horizontal():
                yield Button("Stay", id="stay")
                yield Button("Discard", id="discard", variant="error")
                yield Button("Save", id="save", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        choice = event.button.id
        if choice in ("stay", "discard", "save"):
            self.dismiss(choice)

    def action_choose(self, choice: Choice) -> None:
        self.dismiss(choice)
