"""Pick one of a node's ranks (``p`` in the run monitor): its own lines open alone (``RankLogModal``)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option


class RankPickerModal(ModalScreen[int | None]):
    """Dismisses with the rank picked, or ``None`` (escape)."""

    DEFAULT_CSS = """
    RankPickerModal { align: center middle; }
    RankPickerModal > Vertical { width: 50; height: auto; max-height: 80%; border: round $accent;
                                 background: $surface; padding: 0 1; }
    RankPickerModal OptionList { height: auto; max-height: 20; border: none; }
    RankPickerModal Label { width: 1fr; }
    """
    BINDINGS = [Binding("escape", "close", "back")]

    def __init__(self, where: str, ranks: list[int]) -> None:
        super().__init__()
        self.where = where
        self.ranks = ranks

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"The ranks of {self.where}: enter shows the one picked, alone (its own lines)")
            yield OptionList(*(Option(f"rank {r}", id=f"rank-{r}") for r in self.ranks))

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.ranks[event.option_index])

    def action_close(self) -> None:
        self.dismiss(None)
