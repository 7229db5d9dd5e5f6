"""Pick one rank's lines for a node's pane: the ranks whose lines the pane has seen, or all of them."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option


class RankPickerModal(ModalScreen[int | None | str]):
    """Dismisses with a rank, ``None`` for every line, or ``"keep"`` (escape: nothing changes)."""

    DEFAULT_CSS = """
    RankPickerModal { align: center middle; }
    RankPickerModal > Vertical { width: 50; height: auto; max-height: 80%; border: round $accent;
                                 background: $surface; padding: 0 1; }
    RankPickerModal OptionList { height: auto; max-height: 20; border: none; }
    """
    BINDINGS = [Binding("escape", "keep", "keep as it is")]

    def __init__(self, where: str, ranks: list[int], current: int | None) -> None:
        super().__init__()
        self.where = where
        self.ranks = ranks
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Lines of {self.where}: every rank's, or one rank's (enter)")
            yield OptionList(Option("every line (torchrun's own too)", id="all"),
                             *(Option(f"rank {r}", id=f"rank-{r}") for r in self.ranks))

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = 0 if self.current is None else 1 + self.ranks.index(self.current)
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(None if event.option_index == 0 else self.ranks[event.option_index - 1])

    def action_keep(self) -> None:
        self.dismiss("keep")
