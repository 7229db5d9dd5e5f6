"""What the run monitor's panes are fed: each node's lines into its pane and, prefixed, into the merged
one; its state and GPUs in its title; once the run is being stopped, each node's lines through a
:class:`StopOutput` (torchrun's stop tracebacks folded away, every pane ending with one line saying so);
and the panes written a group at a time.

:class:`tui.screens.monitor.RunMonitorScreen` composes one :class:`PaneFeed` and hands it each run event
after its :class:`RunView` took it."""

from __future__ import annotations

from launcher.api.runs import RunView
from launcher.events import GpuTelemetry, NodeLines, NodeStateChanged, RunEvent, RunState, RunStateChanged
from launcher.present.stop_output import StopOutput, stopped_line
from tui.widgets.node_log import NodeLog

LOG_GROUPS = 2
"""The panes are written in this many groups, one group per tick (``LOG_HZ`` x ``LOG_GROUPS`` ticks a second):
a frame of new lines for 8 panes took ~12 ms here, and a key that came during it waited for all of it."""
STOPPED = (RunState.CANCELLING, RunState.CANCELLED, RunState.TIMED_OUT)
"""States from which the run's lines are the stop's: torchrun's stop tracebacks are folded away."""


class PaneFeed:
    """Owns what goes into the monitor's panes (not which of them is shown: that is ``MonitorViews``'):
    the lines, the stop's folding, the group of panes the last flush wrote."""

    def __init__(self, run_id: str, num_nodes: int, panes: dict[int, NodeLog], view: RunView) -> None:
        self.run_id, self.num_nodes, self.panes, self.view = run_id, num_nodes, panes, view
        self.flush_group = 0
        """The group of panes the last flush wrote (``LOG_GROUPS``)."""
        self.stop_output: dict[int, StopOutput] = {}
        """Once the run is being stopped: each node's lines through its :class:`StopOutput`, which folds
        torchrun's stop tracebacks away (the panes end with one line saying so)."""

    def apply(self, event: RunEvent) -> None:
        """The panes' part of one run event (the view has taken it already)."""
        if isinstance(event, RunStateChanged) and event.state in STOPPED and not self.stop_output:
            for pane in self.panes.values():
                pane.flush()  # what came before the stop is marked as usual
                pane.marking = False
            self.stop_output = {rank: StopOutput() for rank in range(self.num_nodes)}
        if isinstance(event, NodeLines):
            fold = self.stop_output.get(event.node_rank)
            self.push_lines(event.node_rank, event.lines if fold is None else fold.feed(event.lines))
        elif isinstance(event, NodeStateChanged) and 0 <= event.node_rank < self.num_nodes:
            self.panes[event.node_rank].set_state(event.state, event.exit_code, event.host)
        elif isinstance(event, GpuTelemetry) and 0 <= event.node_rank < self.num_nodes:
            self.panes[event.node_rank].set_gpus(self.view.node(event.node_rank).gpu_summary)

    def push_lines(self, rank: int, lines: tuple[str, ...] | list[str]) -> None:
        """Node ``rank``'s lines into its pane and, prefixed, into the merged one."""
        if not lines:
            return
        if 0 <= rank < self.num_nodes:
            self.panes[rank].push(lines)
        prefix = f"[{rank}] "
        self.panes[-1].push([prefix + line for line in lines])

    def end_stopped(self, state: RunState) -> None:
        """A cancelled (or timed-out) run: what each node held back is shown or folded, and every pane ends
        with one line that says the run was stopped and what was folded."""
        folds = self.stop_output or {rank: StopOutput() for rank in range(self.num_nodes)}
        total = 0
        for rank, fold in sorted(folds.items()):
            self.push_lines(rank, fold.end())
            total += fold.folded
            self.panes[rank].push([stopped_line(state.value, fold.folded, self.run_id, rank)])
        self.panes[-1].push([stopped_line(state.value, total, self.run_id, None)])
        self.stop_output = {}

    def flush_next_group(self) -> None:
        """The next group's panes written (the merged pane, -1, is in the last group)."""
        self.flush_group = (self.flush_group + 1) % LOG_GROUPS
        for rank, pane in self.panes.items():
            if rank % LOG_GROUPS == self.flush_group:
                pane.flush()
