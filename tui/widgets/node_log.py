"""Per-node log panes fed in batches: one ``write_lines`` per pane per flush, hidden panes buffered.

A pane is one widget: its lines (a :class:`LogView`) in a border whose title is the node's badge (node,
host, state, GPU use). A pane made of a container, a badge label and a log was three widgets to lay out
and draw each time the panes are shown again (BENCHMARKS.md, the app under load).
"""

from __future__ import annotations

from collections import deque

from rich.text import Text

from launcher.api.runs import classify_line, might_signal
from launcher.events import NodeState
from launcher.words import plural
from tui.widgets.log_view import LogView

MAX_LINES = 20_000
"""Lines kept per pane."""
MAX_PENDING = MAX_LINES
"""Lines buffered per pane between flushes or while hidden (or not mounted yet: past 8 nodes a pane is
mounted when first shown); older ones are dropped from the view, counted, and the note before the next
lines shown says how many. More than the pane keeps would never be shown, so this bounds a node's memory to
about two panes' worth."""
MAX_WRITE = 50
"""Lines written per pane per flush (10 Hz). Faster output shows its newest lines and says how many
it skipped: nobody reads 5,000 lines a second, and every line stays in the node's log file."""


def _note(count: int) -> str:
    """The line where lines are missing from a pane: how many, and where they all are."""
    return f"··· {plural(count, 'line')} not shown (fast output; all are in the node log)"


class NodeLog(LogView):
    """One node: its log, with its state in the border's title. ``push`` only buffers; ``flush`` writes
    (the screen's timer). Every method works before the pane is mounted."""

    DEFAULT_CSS = """
    NodeLog { border: round $panel; border-title-color: $text; height: 1fr; min-height: 6; }
    NodeLog:focus { border: round $accent; }
    NodeLog.-failed { border: round $error; }
    NodeLog.-lost { border: round $error; }
    NodeLog.-reconnecting { border: round $warning; }
    """

    def __init__(self, node_rank: int, host: str = "", max_pending: int = MAX_PENDING, **kwargs) -> None:
        super().__init__(max_lines=MAX_LINES, **kwargs)
        self.node_rank = node_rank
        self.host = host
        self.pending: deque[str] = deque(maxlen=max_pending)
        self.unshown = 0
        """Lines the full buffer let go since the last flush (the oldest): counted in the next note."""
        self.trimmed = 0
        """Lines the pane let go from its top to keep ``MAX_LINES`` (the border says so)."""
        self.filter_text = ""
        self.seen_output = False
        self.all_lines: deque[str] = deque(maxlen=MAX_LINES)
        self.state, self.exit_code, self.gpu_summary = NodeState.PENDING, None, ""
        self.marking = True
        """Mark error lines with ``!!``; off once the run is being stopped (a stop makes jobs print tracebacks)."""
        self.follow = True
        """Keep the newest line in view. The log's own auto-scroll only scrolls a log that is already at its end,
        so once lines went past while following was off it would never catch up again: here following scrolls."""
        self.badge = Text()
        """What the border's title says (a Text: a host or a state is never markup)."""
        self._show_badge()
        self._show_waiting()

    def push(self, lines: tuple[str, ...] | list[str]) -> None:
        maxlen = self.pending.maxlen or 0
        over = len(self.pending) + len(lines) - maxlen
        if over > 0:  # the oldest go; the note says how many
            self.unshown += min(over, len(self.pending) + len(lines))
        self.pending.extend(lines)

    def flush(self) -> int:
        """Write what is buffered if the pane is on screen; returns how many lines were written."""
        if not self.pending or not self.is_on_screen:
            return 0
        lines = list(self.pending)
        self.pending.clear()
        if self.unshown:  # what the full buffer let go stays said where it was, through a re-filter too
            self.all_lines.append(_note(self.unshown))
        self.all_lines.extend(lines)
        if self.border_subtitle and not self.trimmed:
            self.border_subtitle = ""  # the first line: nothing to wait for any more
        wanted = [line for line in lines if self._wanted(line)] if self.filter_text else lines
        # The first batch is history (a reopened run): all the pane keeps, and room for a note above it.
        # After that, live output is capped.
        limit = MAX_LINES - 1 if not self.seen_output else MAX_WRITE
        self.seen_output = True
        skipped = max(0, len(wanted) - limit) + self.unshown
        self.unshown = 0
        tail = wanted[-limit:]
        shown = [self._mark(line) for line in tail] if self.marking and might_signal("\n".join(tail)) else tail
        if skipped > 0:
            shown.insert(0, _note(skipped))
        if shown:
            before = self.line_count
            self.write_lines(shown)
            self._count_trimmed(before + len(shown) - self.line_count)
            self._keep_end()
        return len(shown)

    def _count_trimmed(self, gone: int) -> None:
        """The pane keeps its newest ``MAX_LINES``: those it lets go from the top are counted in its border."""
        if gone <= 0:
            return
        self.trimmed += gone
        self.border_subtitle = f"··· {self.trimmed:,} earlier lines left the pane (all are in the node log)"

    @property
    def is_on_screen(self) -> bool:
        # Its container hides it too (the grid behind the overview, the merged view behind the panes).
        return (self.is_mounted and self.display and self.parent is not None and self.parent.display
                and self.screen.is_current)

    def set_state(self, state: NodeState, exit_code: int | None, host: str) -> None:
        self.host = host or self.host
        self.state, self.exit_code = state, exit_code
        self._show_badge()
        self.set_class(state == NodeState.EXITED and exit_code not in (0, None), "-failed")
        self.set_class(state == NodeState.LOST, "-lost")
        self.set_class(state == NodeState.RECONNECTING, "-reconnecting")
        self._show_waiting()

    def set_gpus(self, summary: str) -> None:
        """GPU utilisation and memory of this node, after its badge."""
        self.gpu_summary = summary
        self._show_badge()

    def set_follow(self, follow: bool) -> None:
        """Following on scrolls to the newest line at once (and with every batch after it); off leaves the
        view where it is."""
        self.follow = follow
        self.auto_scroll = follow
        if self.is_mounted:
            self._keep_end()

    def on_resize(self) -> None:
        """A pane shown again (or the terminal resized) is laid out after its lines were written."""
        self.call_after_refresh(self._keep_end)

    def _keep_end(self) -> None:
        if self.follow:
            self.scroll_end()

    def refilter(self, text: str) -> None:
        """Show only lines containing ``text`` (from the kept history)."""
        self.filter_text = text
        if not self.is_mounted:
            return
        self.clear()
        self.write_lines([self._mark(line) for line in self.all_lines if self._wanted(line)])
        self._keep_end()

    def _wanted(self, line: str) -> bool:
        return not self.filter_text or self.filter_text.lower() in line.lower()

    def _show_badge(self) -> None:
        """``node 1  gpu-b  LOST`` with the state coloured, in the border (a repaint of this pane only)."""
        if self.node_rank < 0:
            badge = Text("all nodes, merged (m: one pane per node)", style="bold")
        else:
            state, exit_code = self.state, self.exit_code
            code = f" (exit {exit_code})" if exit_code is not None else ""
            failed = state == NodeState.LOST or (state == NodeState.EXITED and exit_code not in (0, None))
            style = "bold red" if failed else "yellow" if state == NodeState.RECONNECTING else "bold"
            badge = Text.assemble(f"node {self.node_rank}  {self.host}  ", (f"{state.value}{code}", style))
            if self.gpu_summary:
                badge.append(f"  {self.gpu_summary}")
        if badge != self.badge:
            self.badge = badge
            self.border_title = badge

    def _show_waiting(self) -> None:
        """Until the node's first line, the border says what the node is doing (a blank pane says nothing)."""
        if self.all_lines or self.pending:
            return
        if self.node_rank < 0 or self.state in (NodeState.PENDING, NodeState.STARTING):
            words = "waiting for the first line: preparing the node, starting the job"
        elif self.state in (NodeState.RUNNING, NodeState.RECONNECTING):
            words = "running, no line yet: starting torch and the model can take a few seconds"
        else:
            words = "no output"
        self.border_subtitle = words

    @staticmethod
    def _mark(line: str) -> str:
        sig = classify_line(line)
        return f"!! {line}" if sig is not None else line
