"""What holds GPU memory on a run's nodes (after it ended, a leftover holds GPUs nobody uses): per host
and GPU, each process and the run of ours it belongs to; ``x`` stops those of our ended runs."""

from __future__ import annotations

from textual import getters, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Label

from launcher.present.gpus import whose
from launcher.words import plural
from tui.app_base import AppBase
from tui.widgets.footer import FitFooter
from tui.widgets.header import Header


class GpusScreen(Screen):
    app = getters.app(AppBase)
    DEFAULT_CSS = """
    GpusScreen #gpus-said { height: auto; max-height: 4; padding: 0 1; background: $panel; }
    """
    BINDINGS = [
        Binding("x", "stop", "stop leftovers", tooltip="Stop the processes of our runs that have ended"),
        Binding("r", "reload", "refresh"),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.leftovers = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("", id="gpus-said")
        yield DataTable(cursor_type="row")
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = f"GPUs of the nodes of {self.run_id}"
        self.query_one(DataTable).add_columns("host", "gpu", "pid", "memory", "process", "whose")
        self.load(stop=False)

    def action_reload(self) -> None:
        self.load(stop=False)

    def action_stop(self) -> None:
        if self.leftovers:
            self.load(stop=True)
        else:
            self.notify("no process of an ended run of ours holds GPU memory here")

    def action_back(self) -> None:
        self.app.pop_screen()

    @work(exclusive=True, group="gpu-holders")
    async def load(self, stop: bool) -> None:
        said = self.query_one("#gpus-said", Label)
        said.update("stopping the leftovers ..." if stop else "asking each node's nvidia-smi ...")
        try:
            holders = await self.app.client.nodes.gpu_holders_of_run(self.run_id, stop_ended=stop)
        except (OSError, ValueError, KeyError) as err:
            said.update(f"cannot ask the nodes of {self.run_id}: its plan is not recorded ({err})")
            return
        table = self.query_one(DataTable)
        table.clear()
        lines = []
        for n in holders.nodes:
            if n.error:
                lines.append(f"{n.host}: {n.error}")
                continue
            if n.stopped:
                lines.append(f"{n.host}: stopped {', '.join(map(str, n.stopped))}")
            if not n.holders:
                lines.append(f"{n.host}: {plural(n.gpus, 'GPU')}, no process holds GPU memory")
            for h in n.holders:
                mem = f"{h.used_mib:.0f} MiB" if h.used_mib is not None else "?"
                table.add_row(n.host, "?" if h.gpu is None else str(h.gpu), str(h.pid), mem, h.process,
                              whose(h.run_id, holders.states, stop="x"))
        self.leftovers = sum(1 for n in holders.nodes for h in n.holders if h.run_id and holders.states.get(h.run_id))
        said.update("\n".join(lines) or f"{plural(table.row_count, 'process')} {'holds' if table.row_count == 1 else 'hold'} GPU memory")
