"""What the app shows when the run store is damaged: the paragraph that names the file and the way out,
and the repair itself when asked (the run folders are the truth; the store is rebuilt from them)."""

from __future__ import annotations

from textual import getters, on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from tui.app_base import AppBase
from tui.messages import StoreRepairAnswered


class StoreDamagedModal(ModalScreen[bool]):
    """Dismissed with True once the store was rebuilt, False when the user leaves it damaged (quit)."""

    app = getters.app(AppBase)

    DEFAULT_CSS = """
    StoreDamagedModal { align: center middle; }
    StoreDamagedModal > Vertical { width: 80%; max-width: 110; min-width: 40; height: auto; border: thick $error;
                                   background: $surface; padding: 1 2; }
    StoreDamagedModal .message { width: 100%; height: auto; }
    StoreDamagedModal Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    StoreDamagedModal Button { margin-left: 2; }
    """
    BINDINGS = [("r", "repair", "repair"), ("q,escape", "leave", "quit")]

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message
        self.repaired = False

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.message + "\n\nRepair now? (r: repair, q: quit and leave it as it is)",
                         classes="message", id="store-message", markup=False)
            with Horizontal():
                yield Button("Quit", id="leave")
                yield Button("Repair", id="repair", variant="warning")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "repair":
            self.action_repair()
        else:
            self.action_leave()

    def action_leave(self) -> None:
        self.dismiss(self.repaired)

    def action_repair(self) -> None:
        if self.repaired:
            self.dismiss(True)
            return
        self.query_one("#store-message", Static).update("Rebuilding the run store from the run folders ...")
        self.repair()

    @work(thread=True, exclusive=True, group="store-repair")
    def repair(self) -> None:
        records = self.app.client.records
        owners = records.live_owners()
        if owners:
            named = ", ".join(f"{run_id} (pid {pid})" for run_id, pid in owners)
            self.post_message(StoreRepairAnswered(f"Not now: the owners of {named} are still writing to the "
                                                  "store. Let them end, then repair (fsdp-tui repair).", False))
            return
        report = records.rebuild_store()
        self.post_message(StoreRepairAnswered("\n".join(report.lines()) + "\n\nPress r or escape to go on.", True))

    @on(StoreRepairAnswered)
    def _repair_answered(self, message: StoreRepairAnswered) -> None:
        self.repaired = self.repaired or message.repaired
        self.query_one("#store-message", Static).update(message.text)
