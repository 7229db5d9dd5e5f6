"""Every rank's stack on every node, as the run's owner took it (a hung run: who waits where): asked for
from the run monitor (``s``), gathered until every node's dump has come, then shown in one modal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Label, Log

from launcher.events import StacksDumped

if TYPE_CHECKING:
    from launcher.api.runs import Runs


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


class StackGathering:
    """Owns the stack dumps asked for from one run monitor, from the ask until every node's has come (then
    they are shown together). Dumps replayed from the run's record, asked for before, are not shown."""

    def __init__(self, screen: Screen, run_id: str, num_nodes: int) -> None:
        self.screen, self.run_id, self.num_nodes = screen, run_id, num_nodes
        self.wanted: list[tuple[StacksDumped, str]] | None = None
        """Each dump received since the ask, with its text (``None``: none asked for)."""

    def ask(self, runs: Runs) -> None:
        """Ask the run's owner for every rank's stack on every node (each node's dump comes as an event)."""
        runs.request_stacks(self.run_id)
        self.wanted = []

    def received(self, event: StacksDumped) -> None:
        if self.wanted is not None:
            self.screen.run_worker(self._gather(event), group="stacks")

    async def _gather(self, event: StacksDumped) -> None:
        try:
            text = await asyncio.to_thread(Path(event.path).read_text)
        except OSError as err:
            text = f"cannot read {event.path}: {err.strerror}"
        if self.wanted is None:
            return
        self.wanted.append((event, text))
        if len(self.wanted) < self.num_nodes:
            return
        dumps, self.wanted = self.wanted, None
        title = "; ".join(e.summary for e, _ in dumps) + f"  (kept in {Path(dumps[0][0].path).parent})"
        self.screen.app.push_screen(StacksModal(title, "\n".join(t for _, t in dumps)))
