"""Every rank's stack on a node, as the run's owner took it (a hung run: who waits where)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Log


class StacksModal(ModalScreen[None]):
    DEFAULT_CSS = """
    StacksModal { align: center middle; }
    StacksModal > Vertical { width: 90%; height: 85%; border: thick $accent; background: $surface; }
    StacksModal Label { padding: 0 1; background: $panel; width: 100%; }
    StacksModal Log { height: 1fr; }
    """
    BINDINGS = [Binding("escape,q", "close", "close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text, self.text = title, text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, markup=False)
            yield Log(max_lines=20_000, auto_scroll=False)

    def on_mount(self) -> None:
        log = self.query_one(Log)
        log.write_lines(self.text.splitlines())
        log.scroll_home(animate=False)
        log.focus()

    def action_close(self) -> None:
        self.dismiss(None)
