"""The ``:`` command bar: a one-line input at the bottom; enter hands the text back, escape closes it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from tui.commands import USAGE


class CommandBarModal(ModalScreen[str | None]):
    DEFAULT_CSS = """
    CommandBarModal { align: left bottom; background: $background 30%; }
    CommandBarModal #bar { height: 1; width: 100%; background: $panel; margin-bottom: 1; }
    CommandBarModal #bar Label { width: 2; padding: 0 0 0 1; color: $accent; text-style: bold; }
    CommandBarModal #bar Input { width: 1fr; }
    """
    BINDINGS = [Binding("escape", "close", "close")]

    def compose(self) -> ComposeResult:
        with Horizontal(id="bar"):
            yield Label(":")
            yield Input(placeholder=USAGE, compact=True)

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_close(self) -> None:
        self.dismiss(None)
