"""Deleting a run from the home screen: forget its record only (its files stay where they are, said with
where), remove its folders on every node first and then forget it (``fsdp-tui rm --files``), or keep it."""

from __future__ import annotations

from typing import Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

Choice = Literal["files", "record", "keep"]


class DeleteRunModal(ModalScreen[Choice]):
    DEFAULT_CSS = """
    DeleteRunModal { align: center middle; }
    DeleteRunModal > Vertical { width: 80%; max-width: 110; min-width: 40; height: auto; border: thick $warning;
                                background: $surface; padding: 1 2; }
    DeleteRunModal .question { width: 100%; height: auto; }
    DeleteRunModal Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    DeleteRunModal Button { margin-left: 2; }
    """
    BINDINGS = [
        Binding("f", "choose('files')", "files too"),
        Binding("r", "choose('record')", "record only"),
        Binding("n,escape", "choose('keep')", "keep"),
    ]

    def __init__(self, run_id: str, stays: list[str]) -> None:
        super().__init__()
        self.run_id = run_id
        self.stays = stays

    def compose(self) -> ComposeResult:
        where = ("\n".join(f"  {line}" for line in self.stays)) if self.stays else "  (no folder of it is left)"
        with Vertical():
            yield Static(f"Delete run {self.run_id}?\nIts files:\n{where}\n\n"
                         "f: remove its folders on every node and here, then forget it (fsdp-tui rm --files)\n"
                         "r: forget its record only; its files stay where they are\n"
                         "escape: keep it", classes="question", markup=False)
            with Horizontal():
                yield Button("Keep", id="keep")
                yield Button("Record only", id="record", variant="warning")
                yield Button("Files too", id="files", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        choice = event.button.id
        if choice in ("keep", "record", "files"):
            self.dismiss(choice)

    def action_choose(self, choice: Choice) -> None:
        self.dismiss(choice)
