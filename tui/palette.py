"""The command palette (ctrl+p) finds things by name: runs (open, checkpoints, relaunch), workloads
(edit, launch) and themes, next to Textual's own commands."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.message import Message

from launcher.words import plural
from tui.app_base import AppBase
from tui.messages import LaunchAsked, NettestAsked, RelaunchAsked, RunChosen, WorkloadChosen

if TYPE_CHECKING:
    from launcher.api.nettests import NettestRecord


@dataclass(frozen=True)
class Entry:
    text: str
    """What is matched and shown."""
    help: str
    run: Callable[[], None]


class FsdpCommands(Provider):
    async def startup(self) -> None:
        self.entries = await asyncio.to_thread(self._entries)

    def _entries(self) -> list[Entry]:
        from tui.screens.workload_files import find_workloads, folder_label

        app = self.app
        assert isinstance(app, AppBase)
        ask = self.asking
        out: list[Entry] = []
        for run in app.client.runs.list(limit=200):
            what = f"{run.experiment}, {run.state.value}"
            out.append(Entry(f"open run {run.run_id}", f"the run monitor ({what})", ask(partial(RunChosen, run.run_id))))
            out.append(Entry(f"checkpoints of {run.run_id}", "list, resume from, export, delete",
                             partial(self.open_checkpoints, run.run_id)))
            out.append(Entry(f"relaunch {run.run_id}", f"what it ran, as a new run ({what})",
                             ask(partial(RelaunchAsked, run.run_id))))
        for path in find_workloads(app.extra_workloads):
            where = f"{folder_label(path.parent)}/{path.name}"
            out.append(Entry(f"edit {where}", "open the workload in the editor", ask(partial(WorkloadChosen, Path(path)))))
            out.append(Entry(f"launch {where}", "launch it now", ask(partial(LaunchAsked, Path(path)))))
            out.append(Entry(f"test the interconnect of {where}", "a quick nettest on its nodes: bandwidths, "
                             "the slow node", ask(partial(NettestAsked, Path(path)))))
        for record in app.client.nettests.list()[:50]:
            out.append(Entry(f"nettest {record.run_id}", f"a kept interconnect test ({plural(len(record.nodes), 'node')})",
                             partial(self.open_kept_nettest, record)))
        for name in sorted(app.available_themes):
            out.append(Entry(f"theme {name}", "switch the colours (it persists)", partial(setattr, app, "theme", name)))
        return out

    def asking(self, message: Callable[[], Message]) -> Callable[[], None]:
        """What an entry runs to ask the app (:mod:`tui.messages`): a new message each time it is chosen."""
        def ask() -> None:
            self.app.post_message(message())

        return ask

    def open_checkpoints(self, run_id: str) -> None:
        from tui.screens.checkpoints import CheckpointsScreen

        self.app.push_screen(CheckpointsScreen(run_id))

    def open_kept_nettest(self, record: NettestRecord) -> None:
        from tui.screens.nettest import NettestScreen

        self.app.push_screen(NettestScreen(record=record))

    async def discover(self) -> Hits:
        for entry in self.entries[:30]:
            yield DiscoveryHit(entry.text, entry.run, help=entry.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for entry in self.entries:
            score = matcher.match(entry.text)
            if score > 0:
                yield Hit(score, matcher.highlight(entry.text), entry.run, help=entry.help)
