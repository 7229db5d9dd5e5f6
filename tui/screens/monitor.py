"""The run monitor: header, sparklines, memory gauges and one log pane per node, or past the nodes whose
panes fit, the node overview (one row per node, the odd node marked; ``o`` toggles, ``enter`` opens a
node's pane alone).

Run events arrive in an async worker and only update a :class:`RunView` and per-pane buffers; a timer
writes each visible pane's batch 10 times a second (``LOG_HZ``, half of the panes at each of 20 ticks) and
a 2 Hz timer, between those ticks, redraws the costly widgets. Both wait a moment after a key, so the
frame the key causes comes first. Leaving the screen never stops the run.
"""

from __future__ import annotations

import asyncio
import time

from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.screen import Screen
from textual.widgets import Input, Label, Static

from launcher.api.runs import NodeRow, RunSummary, RunView, node_rows
from launcher.events import (
    NodeSwapped,
    RunEvent,
    RunFinished,
    RunState,
    StacksDumped,
)
from tui.app_base import AppBase
from tui.frames import draw_soon
from tui.messages import ContinuedKnown, NetworkKnown, RelaunchAsked
from tui.screens.monitor_lines import SummaryLines
from tui.screens.monitor_panes import LOG_GROUPS, PaneFeed
from tui.screens.monitor_views import PANE_MIN_ROWS as PANE_MIN_ROWS  # the grid's rule, named here too
from tui.screens.monitor_views import MonitorViews
from tui.screens.stacks import StackGathering
from tui.widgets.footer import FitFooter
from tui.widgets.header import Header
from tui.widgets.metrics import MetricsPanel
from tui.widgets.node_log import MAX_PENDING, NodeLog
from tui.widgets.node_overview import NodeOverview

LOG_HZ = 10
"""How often each shown pane is written."""
DRAW_HZ = 2
OVERVIEW_PAST = 8
"""More nodes than this open on the node overview instead of the panes (up to this many, panes keep
``PANE_MIN_ROWS`` each and the grid scrolls); ``o`` switches either way at any count."""
UNSEEN_LINES = 5_000
"""Past ``OVERVIEW_PAST`` nodes, the newest lines a node's pane keeps until it is first shown (what it
shows when opened; every line stays in the node's log): 64 nodes then hold ~1 MB each, not ~5 MB."""
SHORT_BELOW = 32
"""Terminal rows under which the four sparklines share one row."""
INPUT_FIRST_S = 0.1
"""After a key (or a click, or the wheel), the panes' flush and the redraw wait this long, once: the frame
the key causes is drawn first, not behind (or together with) a frame of new lines and figures."""
SAFE_STEP_EVERY_S = 30.0
"""How often the monitor asks rank 0's node for the newest complete checkpoint (the last safe step)."""
SAFE_RECORD_EVERY_S = 1.0
"""How often it reads what the run's owner recorded of it (each gathered save as it comes; no node asked)."""


class RunMonitorScreen(Screen):
    """Owns one run's view (:class:`RunView`, fed by the run's events), its panes and the pace at which
    they are written and the costly widgets redrawn; what goes into the panes is its :class:`PaneFeed`'s,
    which view is shown its :class:`MonitorViews`'."""

    app = getters.app(AppBase)
    DEFAULT_CSS = """
    RunMonitorScreen #summary { height: 1; width: 1fr; padding: 0 1; background: $panel; text-style: bold; }
    RunMonitorScreen #why { height: auto; max-height: 3; padding: 0 1; color: $error; display: none; }
    RunMonitorScreen #why.-shown { display: block; }
    RunMonitorScreen #logs { grid-size: 2; grid-gutter: 0 1; height: 1fr; min-height: 8; overflow-y: auto; }
    RunMonitorScreen #merged { height: 1fr; display: none; }
    RunMonitorScreen #overview { display: none; }
    RunMonitorScreen #filter { display: none; height: 3; }
    RunMonitorScreen.-filtering #filter { display: block; }
    """
    BINDINGS = [
        Binding("c", "cancel", "cancel", tooltip="Cancel the run on every node (asks first)"),
        Binding("m", "merged", "merged", tooltip="All nodes' lines in one pane, or one pane per node"),
        Binding("o", "overview", "overview", tooltip="Every node as one row (odd nodes marked), or the panes"),
        Binding("f", "follow", "follow", show=False),  # the summary line shows it: "follow on (f)"
        Binding("slash", "filter", "filter", tooltip="Show only lines containing a text"),
        Binding("e", "first_error", "error", tooltip="Jump to the first error on any node"),
        Binding("l", "relaunch", "relaunch", tooltip="Launch what this run ran again, as a new run"),
        Binding("k", "checkpoints", "ckpts", tooltip="This run's checkpoints: resume, export, delete"),
        Binding("s", "stacks", "stacks", show=False, tooltip="Every rank's stack on every node (a hung run)"),
        Binding("g", "gpus", "gpus", show=False, tooltip="What holds GPU memory on the run's nodes (leftovers)"),
        Binding("r", "ranks", "ranks", show=False, tooltip="Step time per rank over recent steps; the slow rank marked"),
        Binding("a", "samples", "samples", show=False,
                tooltip="What the model answers as it learns: each prompt with its answer per step"),
        Binding("p", "pick_rank", "rank", show=False, tooltip="Only one rank's lines in this node's pane (torchrun's ranks)"),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, run_id: str, num_nodes: int, recorded: RunSummary | None = None, events=None) -> None:
        super().__init__()
        self.run_id = run_id
        self.num_nodes = num_nodes
        self.events = events
        """The run's events (tests hand in a recording); by default the run's record is followed."""
        self.view = RunView(run_id)
        self.follow = True
        self.lines = SummaryLines(self, self.view)
        """The summary line and the why-line, with the last safe step."""
        self.waited: set[str] = set()
        """The periodic jobs that have let a key go first and are due at their next tick."""
        unseen = UNSEEN_LINES if num_nodes > OVERVIEW_PAST else MAX_PENDING
        self.panes: dict[int, NodeLog] = {rank: NodeLog(rank, max_pending=unseen, id=f"node-{rank}")
                                          for rank in range(num_nodes)}
        """Each node's pane (-1: all nodes merged). Past ``OVERVIEW_PAST`` nodes a pane is mounted when first
        shown: until then it only buffers (bounded), and the screen stays small."""
        self.panes[-1] = NodeLog(-1, "all nodes", id="node-all")
        self.feed = PaneFeed(run_id, num_nodes, self.panes, self.view)
        """What goes into the panes: each node's lines, the stop's folding, a group of panes per flush."""
        self.views = MonitorViews(self, self.panes, num_nodes, self.overview_rows)
        """Which view is shown (panes, one node alone, merged, overview), the keys' focus, the filter."""
        self.stacks = StackGathering(self, run_id, num_nodes)
        """The stack dumps asked for with ``s``, until every node's has come."""
        self.recorded_end: float | None = None
        """When a reopened run ended, from its record; replaying its end must not restart the clock."""
        if recorded is not None:
            self.view.started_at = recorded.started_at
            self.recorded_end = recorded.ended_at

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label(f"run {self.run_id}", id="summary")
        yield Static("", id="why", markup=False)
        yield MetricsPanel()
        yield Input(placeholder="show only lines containing...", id="filter")
        grid = Grid(id="logs")
        grid.styles.grid_size_columns = 1 if self.num_nodes == 1 else 2  # one column for a pane alone too
        with grid:
            if self.num_nodes <= OVERVIEW_PAST:
                yield from (self.panes[rank] for rank in range(self.num_nodes))
        with Vertical(id="merged"):
            yield self.panes[-1]
        yield NodeOverview(id="overview")
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = f"fsdp-tui: {self.run_id}"
        self.query_one("#filter", Input).disabled = True  # keys go to the screen until "/" is pressed
        for rank in range(self.num_nodes):
            self.view.node(rank)  # a node not heard from yet is a row too
        if self.num_nodes > OVERVIEW_PAST:
            self.views.show_overview(True)
        self.views.focus_logs()
        self.set_interval(1 / (LOG_HZ * LOG_GROUPS), self.flush_logs)
        # Half a flush later: a frame of new figures is not also a frame of new lines (the two were the
        # longest frames, and a key landing behind one waited for both).
        self.set_timer(0.5 / (LOG_HZ * LOG_GROUPS), lambda: self.set_interval(1 / DRAW_HZ, self.redraw))
        self.consume()
        self.show_network()
        if self.events is None:  # a recording handed in has no nodes to ask
            self.refresh_safe_step()
            self.set_interval(SAFE_STEP_EVERY_S, self.refresh_safe_step)
            self.set_interval(SAFE_RECORD_EVERY_S, self.read_safe_step)

    @work(thread=True, group="network")
    def show_network(self) -> None:
        """The newest interconnect test of this run's nodes, in the header (``fsdp-tui nettest``)."""
        client = self.app.client
        record = client.runs.get(self.run_id)
        hosts = tuple(n.host for n in sorted(record.nodes, key=lambda n: n.node_rank)) if record else ()
        test = client.nettests.newest_for(hosts, besides=self.run_id) if hosts else None
        if test is not None and test.measured is not None:
            from launcher.present.nettest import summary

            judged = client.nettests.judge(test.measured, test.nodes)
            self.post_message(NetworkKnown(f"network ({test.run_id}): {summary(judged)}"))
        continued = client.runs.continued(self.run_id) if record else None
        if continued is not None:
            self.post_message(ContinuedKnown(continued.words()))

    @on(ContinuedKnown)
    def _continued_known(self, message: ContinuedKnown) -> None:
        self.view.continues = message.text  # the why-line says it when nothing weighs more

    @on(NetworkKnown)
    def _network_known(self, message: NetworkKnown) -> None:
        self.sub_title = message.text

    @work(exclusive=True, group="safe-step")
    async def refresh_safe_step(self) -> None:
        await self.lines.refresh_safe_step(self.app.client.runs, self.run_id)

    @work(exclusive=True, group="safe-record")
    async def read_safe_step(self) -> None:
        await self.lines.refresh_safe_step(self.app.client.runs, self.run_id, ask_node=False)

    def on_resize(self, event) -> None:
        self.query_one(MetricsPanel).set_class(event.size.height < SHORT_BELOW, "-short")
        self.call_after_refresh(self.views.fit_panes)

    def overview_rows(self) -> list[NodeRow]:
        """The overview's rows as of now (the clock read here, where tests can fix it)."""
        return node_rows(self.view, time.time())

    def pane(self, rank: int) -> NodeLog:
        """Node ``rank``'s pane; -1 is the merged all-node view (kept at mount: no DOM query per batch,
        and none that fails while the screen is being taken down)."""
        return self.panes[rank]

    @work(exclusive=True, group="run-events")
    async def consume(self) -> None:
        from launcher.api.runs import FollowGaveUp

        events = self.events
        if events is None:
            self.view.resume_basis = await asyncio.to_thread(self.app.client.runs.resume_basis_of, self.run_id)
            events = self.app.client.runs.follow(self.run_id)
        try:
            async for event in events:
                self.on_run_event(event)
                await asyncio.sleep(0)  # let key presses in between events of a burst
        except FollowGaveUp as err:
            self.notify(str(err), title="nothing records this run", severity="error", timeout=30)

    def on_run_event(self, event: RunEvent) -> None:
        self.view.apply(event)
        self.feed.apply(event)
        if isinstance(event, StacksDumped):
            self.stacks.received(event)
        elif isinstance(event, NodeSwapped) and self.view.swaps and not self.view.state.is_final:
            swap = self.view.swaps[-1]  # a failed node replaced, then the run's first step after it
            self.notify(f"{swap.state_word}: {swap.words()}", title=f"swap {swap.number}", timeout=15,
                        severity="information" if swap.recovered or not swap.settled else "warning")
        elif isinstance(event, RunFinished):
            if event.state in (RunState.CANCELLED, RunState.TIMED_OUT):
                self.feed.end_stopped(event.state)
            if self.recorded_end is not None:
                self.view.ended_at = self.recorded_end
            if self.events is None:
                self.refresh_safe_step()  # the end's checkpoints (a final save, a cancel's), not the last poll's
            summary = event.triage.summary if event.triage is not None else None
            self.notify(f"run {event.state.value}" + (f": {summary}" if summary else ""),
                        severity="information" if event.state.value == "succeeded" else "error", timeout=10)

    def after_input(self, job: str) -> bool:
        """Whether periodic ``job`` should let the user's last input be drawn first (then it waits until its
        next tick, never twice in a row: new lines are at most one tick late)."""
        if job not in self.waited and self.app.input_within(INPUT_FIRST_S):
            self.waited.add(job)
            return True
        self.waited.discard(job)
        return False

    def flush_logs(self) -> None:
        if self.after_input("flush"):
            return
        self.feed.flush_next_group()

    def redraw(self) -> None:
        if self.after_input("redraw"):
            self.set_timer(INPUT_FIRST_S, self.redraw)  # not a whole 2 Hz tick late
            return
        self.lines.draw(self.follow)
        with self.app.batch_update():
            self.query_one(MetricsPanel).refresh_from(self.view)
            if self.views.overview_shown:
                self.query_one(NodeOverview).show(self.overview_rows())

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
        self.notify("cancelling: SIGTERM, then SIGKILL after the grace period")
        report = await self.app.client.runs.cancel(self.run_id)
        for line in report.leftovers:
            self.notify(f"{line} (still alive after SIGKILL)", severity="error", timeout=15)

    def action_follow(self) -> None:
        self.follow = not self.follow
        for pane in self.panes.values():
            pane.set_follow(self.follow)
        self.lines.draw_summary(self.follow)  # "follow off (f)" in the frame this key causes, not at the next redraw
        draw_soon(self)

    def action_first_error(self) -> None:
        found = self.view.first_error()
        if found is None:
            self.notify("no error signature in any node's log")
            return
        rank, line_no, line = found
        self.follow = False
        for other in self.panes.values():
            other.set_follow(False)
        # From the overview: that pane alone; its line once it is mounted and shown.
        self.views.show_node(rank, then=lambda: self._show_line(rank, line_no))
        self.notify(f"node {rank}, line {line_no + 1}: {line[:120]}", severity="warning")

    def _show_line(self, rank: int, line_no: int) -> None:
        pane = self.pane(rank)
        pane.flush()
        pane.scroll_to_line(line_no - 2)
        pane.focus()

    def action_relaunch(self) -> None:
        self.post_message(RelaunchAsked(self.run_id))

    def action_stacks(self) -> None:
        if self.view.state.is_final:
            self.notify("the run has ended: no process to look at")
            return
        self.stacks.ask(self.app.client.runs)
        self.notify("asking every node for every rank's stack ...")

    def action_gpus(self) -> None:
        from tui.screens.gpus import GpusScreen

        self.app.push_screen(GpusScreen(self.run_id))

    def action_ranks(self) -> None:
        from tui.screens.ranks import RanksScreen

        self.app.push_screen(RanksScreen(self.run_id, self.num_nodes))

    def action_samples(self) -> None:
        from tui.screens.samples import SamplesScreen

        self.app.push_screen(SamplesScreen(self.run_id))

    @work(exclusive=True, group="rank-picker")
    async def action_pick_rank(self) -> None:
        """The ranks of the node whose pane has the keys (node 0 elsewhere); the one picked opens alone,
        read from its node."""
        from tui.screens.rank_log import RankLogModal
        from tui.screens.rank_picker import RankPickerModal

        pane = self.focused if isinstance(self.focused, NodeLog) and self.focused.node_rank >= 0 else None
        node = pane.node_rank if pane is not None else (self.views.alone if self.views.alone is not None else 0)
        ranks = await asyncio.to_thread(self.app.client.run_files.ranks_of_node, self.run_id, node)
        if not ranks:
            self.notify("this run's ranks are not known (no plan on record)")
            return

        def picked(rank: int | None) -> None:
            if rank is not None:
                self.app.push_screen(RankLogModal(self.run_id, rank))

        self.app.push_screen(RankPickerModal(f"node {node}", ranks), picked)

    def action_checkpoints(self) -> None:
        from tui.screens.checkpoints import CheckpointsScreen

        self.app.push_screen(CheckpointsScreen(self.run_id))

    def action_back(self) -> None:
        if self.views.filtering:  # escape in the filter clears it; a second one leaves
            self.views.close_filter()
            self.views.focus_logs()
            return
        if self.views.alone is not None:  # a node opened from the overview: back to it
            self.views.show_overview(True)
            return
        self.app.pop_screen()

    # -- the views (MonitorViews): keys and the filter box's messages --------------------------------------

    def action_merged(self) -> None:
        self.views.show_merged(not self.views.merged)

    def action_overview(self) -> None:
        self.views.toggle_overview()

    def action_filter(self) -> None:
        self.views.open_filter()

    def on_node_overview_node_chosen(self, event: NodeOverview.NodeChosen) -> None:
        self.views.show_alone(event.node_rank)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.views.filter_typed(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.views.filter_submitted(event.value)
