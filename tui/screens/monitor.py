"""The run monitor: header, sparklines, memory gauges and one log pane per node.

Run events arrive in an async worker and only update a :class:`RunView` and per-pane buffers; a
10 Hz timer (``LOG_HZ``) writes log batches (one ``write_lines`` per visible pane) and a 2 Hz timer redraws
the costly widgets. Leaving the screen never stops the run.
"""

from __future__ import annotations

import asyncio

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.screen import Screen
from textual.widgets import Header, Input, Label

from launcher.events import GpuTelemetry, MetricsRecorded, NodeLines, NodeStateChanged, RunEvent, RunFinished
from launcher.run_view import RunView, fmt_duration
from launcher.store import RunSummary
from tui.widgets.footer import FitFooter
from tui.widgets.metrics import MetricsPanel
from tui.widgets.node_log import NodeLog

LOG_HZ = 10
DRAW_HZ = 2
PANE_MIN_ROWS = 9
"""A node pane shorter than this shows too few lines: the grid then scrolls (tab moves between panes)."""
SHORT_BELOW = 32
"""Terminal rows under which the four sparklines share one row."""


class RunMonitorScreen(Screen):
    DEFAULT_CSS = """
    RunMonitorScreen #summary { height: 1; padding: 0 1; background: $panel; text-style: bold; }
    RunMonitorScreen #logs { grid-size: 2; grid-gutter: 0 1; height: 1fr; min-height: 8; overflow-y: auto; }
    RunMonitorScreen #logs.-one { grid-size: 1; }
    RunMonitorScreen #merged { height: 1fr; display: none; }
    RunMonitorScreen #filter { display: none; height: 3; }
    RunMonitorScreen.-filtering #filter { display: block; }
    """
    BINDINGS = [
        Binding("c", "cancel", "cancel", tooltip="Cancel the run on every node (asks first)"),
        Binding("m", "merged", "merged", tooltip="All nodes' lines in one pane, or one pane per node"),
        Binding("f", "follow", "follow", show=False),  # the summary line shows it: "follow on (f)"
        Binding("slash", "filter", "filter", tooltip="Show only lines containing a text"),
        Binding("e", "first_error", "error", tooltip="Jump to the first error on any node"),
        Binding("l", "relaunch", "relaunch", tooltip="Launch the same workload again"),
        Binding("k", "checkpoints", "ckpts", tooltip="This run's checkpoints: resume, export, delete"),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, run_id: str, num_nodes: int, handle=None, recorded: RunSummary | None = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.num_nodes = num_nodes
        self.handle = handle
        self.view = RunView(run_id)
        self.follow = True
        self.merged = False
        """The all-node view is shown instead of the per-node grid."""
        self.recorded_end: float | None = None
        """When a reopened run ended, from its record; replaying its end must not restart the clock."""
        if recorded is not None:
            self.view.started_at = recorded.started_at
            self.recorded_end = recorded.ended_at

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label(f"run {self.run_id}", id="summary")
        yield MetricsPanel()
        yield Input(placeholder="show only lines containing...", id="filter")
        with Grid(id="logs", classes="-one" if self.num_nodes == 1 else ""):
            for rank in range(self.num_nodes):
                yield NodeLog(rank, id=f"node-{rank}")
        with Vertical(id="merged"):
            yield NodeLog(-1, "all nodes", id="node-all")
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = f"fsdp-tui: {self.run_id}"
        self.query_one("#filter", Input).disabled = True  # keys go to the screen until "/" is pressed
        self.pane(0).log.focus()
        self.set_interval(1 / LOG_HZ, self.flush_logs)
        self.set_interval(1 / DRAW_HZ, self.redraw)
        self.consume()

    def on_resize(self, event) -> None:
        self.query_one(MetricsPanel).set_class(event.size.height < SHORT_BELOW, "-short")
        self.call_after_refresh(self.fit_panes)

    def fit_panes(self) -> None:
        """Panes share the grid's height while each keeps ``PANE_MIN_ROWS``; past that, the grid scrolls."""
        grid = self.query_one("#logs", Grid)
        rows = -(-self.num_nodes // (1 if self.num_nodes == 1 else 2))
        rows_css = "1fr" if grid.size.height >= rows * PANE_MIN_ROWS else str(PANE_MIN_ROWS)
        if str(grid.styles.grid_rows) != rows_css:
            grid.styles.grid_rows = rows_css

    def pane(self, rank: int) -> NodeLog:
        """Node ``rank``'s pane; -1 is the merged all-node view."""
        return self.query_one("#node-all" if rank < 0 else f"#node-{rank}", NodeLog)

    @work(exclusive=True, group="run-events")
    async def consume(self) -> None:
        from launcher.session import attach

        if self.handle is None:
            self.handle = await attach(self.run_id, home=self.app.home)
        async for event in self.handle.events():
            self.on_run_event(event)
            await asyncio.sleep(0)  # let key presses in between events of a burst

    def on_run_event(self, event: RunEvent) -> None:
        self.view.apply(event)
        if isinstance(event, NodeLines):
            if 0 <= event.node_rank < self.num_nodes:
                self.pane(event.node_rank).push(event.lines)
            prefix = f"[{event.node_rank}] "
            self.pane(-1).push([prefix + line for line in event.lines])
        elif isinstance(event, NodeStateChanged) and 0 <= event.node_rank < self.num_nodes:
            self.pane(event.node_rank).set_state(event.state, event.exit_code, event.host)
        elif isinstance(event, GpuTelemetry) and 0 <= event.node_rank < self.num_nodes:
            self.pane(event.node_rank).set_gpus(self.view.node(event.node_rank).gpu_summary)
        elif isinstance(event, RunFinished):
            if self.recorded_end is not None:
                self.view.ended_at = self.recorded_end
            summary = (event.triage or {}).get("summary")
            self.notify(f"run {event.state.value}" + (f": {summary}" if summary else ""),
                        severity="information" if event.state.value == "succeeded" else "error", timeout=10)
        elif isinstance(event, MetricsRecorded):
            pass

    def flush_logs(self) -> None:
        for pane in self.query(NodeLog):
            pane.flush()

    def redraw(self) -> None:
        v = self.view
        step = f"{v.step}/{v.max_steps}" if v.max_steps else str(v.step)
        tps = f"{v.tokens_per_s:,.0f} tok/s" if v.tokens_per_s else "- tok/s"
        mfu = f"  MFU {v.mfu:.1%}" if v.mfu is not None else ""
        text = (f"{v.state.value.upper()}  attempt {v.attempt}  elapsed {fmt_duration(v.elapsed_s())}  "
                f"ETA {fmt_duration(v.eta_s())}  step {step}  {tps}{mfu}  follow {'on' if self.follow else 'off'} (f)")
        self.query_one("#summary", Label).update(text)
        with self.app.batch_update():
            self.query_one(MetricsPanel).refresh_from(v)

    def action_cancel(self) -> None:
        from tui.screens.confirm import ConfirmModal

        if self.view.state.is_final:
            self.notify("the run has ended")
            return

        def done(yes: bool | None) -> None:
            if yes:
                self.cancel_run()

        self.app.push_screen(ConfirmModal(f"Cancel run {self.run_id} on all its nodes?"), done)

    @work(exclusive=True, group="run-cancel")
    async def cancel_run(self) -> None:
        if self.handle is not None and getattr(self.handle, "task", None) is not None:
            await self.handle.cancel()
        else:
            import asyncio

            from launcher.session import cancel_run

            await asyncio.to_thread(cancel_run, self.run_id, home=self.app.home)
        self.notify("cancelling: SIGTERM, then SIGKILL after the grace period")

    def action_merged(self) -> None:
        self.show_merged(not self.merged)

    def show_merged(self, merged: bool) -> None:
        # Display set on the two containers only: a class on the screen would restyle every widget.
        self.merged = merged
        self.query_one("#logs").display = not merged
        self.query_one("#merged").display = merged

    def action_follow(self) -> None:
        self.follow = not self.follow
        for pane in self.query(NodeLog):
            pane.set_follow(self.follow)

    def action_filter(self) -> None:
        self.add_class("-filtering")
        box = self.query_one("#filter", Input)
        box.disabled = False
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        for pane in self.query(NodeLog):
            pane.refilter(event.value)
        if not event.value:
            self.remove_class("-filtering")
            event.input.disabled = True
        self.pane(0).log.focus()

    def action_first_error(self) -> None:
        found = self.view.first_error()
        if found is None:
            self.notify("no error signature in any node's log")
            return
        rank, line_no, line = found
        self.show_merged(False)
        pane = self.pane(rank)
        pane.flush()
        self.follow = False
        pane.set_follow(False)
        pane.log.scroll_to(y=max(0, line_no - 2), animate=False)
        self.notify(f"node {rank}, line {line_no + 1}: {line[:120]}", severity="warning")

    def action_relaunch(self) -> None:
        from pathlib import Path

        from launcher.store import RunStore

        record = RunStore(self.app.home).get_run(self.run_id)
        if record is None or not record.summary.workload_path:
            self.notify("no workload file recorded for this run", severity="warning")
            return
        self.app.launch_workload(Path(record.summary.workload_path), [])

    def action_checkpoints(self) -> None:
        from tui.screens.checkpoints import CheckpointsScreen

        self.app.push_screen(CheckpointsScreen(self.run_id))

    def action_back(self) -> None:
        self.app.pop_screen()
