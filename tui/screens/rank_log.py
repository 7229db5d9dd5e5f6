"""One rank's own output, from the node that ran it (``p`` in the run monitor, then a rank): torchrun's lines
of that rank alone, followed while the run lives. What a node's pane shows is every rank of the node at
once; this is what ``fsdp-tui logs RUN --rank R`` prints."""

from __future__ import annotations

import asyncio

from textual import getters, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label

from launcher.words import plural
from tui.app_base import AppBase
from tui.widgets.log_view import LogView

POLL_S = 0.5


class RankLogModal(ModalScreen[None]):
    app = getters.app(AppBase)
    DEFAULT_CSS = """
    RankLogModal { align: center middle; }
    RankLogModal > Vertical { width: 95%; height: 90%; border: thick $accent; background: $surface; }
    RankLogModal Label { padding: 0 1; background: $panel; width: 100%; }
    RankLogModal LogView { height: 1fr; }
    """
    BINDINGS = [Binding("escape", "close", "back")]

    def __init__(self, run_id: str, rank: int) -> None:
        super().__init__()
        self.run_id, self.rank = run_id, rank
        self.lines_shown = 0

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"rank {self.rank} of {self.run_id}: reading it from its node ...", id="rank-title",
                        markup=False)
            yield LogView(max_lines=20_000, id="rank-lines")

    def on_mount(self) -> None:
        self.query_one(LogView).focus()
        self.follow()

    @work(exclusive=True, group="rank-log")
    async def follow(self) -> None:
        from launcher.api.run_files import LineSplitter, RankLogError

        client = self.app.client
        title = self.query_one("#rank-title", Label)
        view = self.query_one(LogView)
        try:
            log = await asyncio.to_thread(client.run_files.rank_log, self.run_id, self.rank)
        except RankLogError as err:
            title.update(str(err))
            return
        splitter = LineSplitter()
        try:
            while True:
                record = await asyncio.to_thread(client.runs.get, self.run_id)
                final = record is None or record.summary.state.is_final
                async for chunk in log.chunks():  # one chunk held at a time, whatever the log's size
                    self._show(view, splitter.feed(chunk))
                self._show(view, splitter.flush() if final else [])
                said = "following" if not final else "the run has ended"
                title.update(f"{log.label}: {plural(self.lines_shown, 'line')} ({said}; esc: back)"
                             if self.lines_shown else
                             f"{log.label}: nothing of its own yet ({said}; each rank's lines are kept apart when "
                             "the job runs under torchrun, and the built-in trainer prints from rank 0; esc: back)")
                if final:
                    return
                await asyncio.sleep(POLL_S)
        except RankLogError as err:
            title.update(str(err))
        finally:
            await log.close()

    def _show(self, view: LogView, lines: list[str]) -> None:
        if lines:
            view.write_lines(lines)
            self.lines_shown += len(lines)

    def action_close(self) -> None:
        self.dismiss(None)
