"""Deleting a run from the home screen: forget its record only (its files stay where they are, said with
where), remove its folders on every node first and then forget it (``fsdp-tui rm --files``), or keep it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

if TYPE_CHECKING:
    from textual.screen import Screen

    from launcher.api import Client
    from launcher.api.run_files import Left

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

    def __init__(self, run_id: str, stays: list[Left]) -> None:
        super().__init__()
        self.run_id = run_id
        self.stays = stays

    def compose(self) -> ComposeResult:
        from launcher.present.run_files import folder_line

        where = "\n".join(f"  {folder_line(f)}" for f in self.stays) if self.stays else "  (no folder of it is left)"
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


async def forget_run(screen: Screen, client: Client, run_id: str, *, files: bool) -> bool:
    """Forget the run; with ``files``, remove its folders on every node first (the record stays when a
    node could not, so that the user can try again). How it went is said in ``screen``'s notifications;
    ``False``: its folders could not be removed, and it was not asked to forget the run."""
    import asyncio

    if files:
        screen.notify(f"removing the folders of {run_id} on its nodes ...")
        try:
            report = await client.run_files.clean(run_id)
        except (LookupError, ValueError) as err:
            screen.notify(str(err), severity="error", timeout=10)
            return False
        if not report.ok:
            screen.notify("; ".join(report.lines()) + ". The run is kept: d tries again.", severity="error",
                          timeout=20)
            return False
        screen.notify("; ".join(report.lines()) or "no folder of it was left", timeout=8)
    try:
        await asyncio.to_thread(client.runs.delete, run_id)
    except (LookupError, ValueError) as err:
        screen.notify(str(err), severity="error")
    return True
