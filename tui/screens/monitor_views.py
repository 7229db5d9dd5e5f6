"""Which of the run monitor's views is shown: the node panes (all, or one node's alone), the merged
all-node pane, or the node overview; where the keys go; and the filter, which applies to the view shown.

:class:`tui.screens.monitor.RunMonitorScreen` composes one :class:`MonitorViews` and forwards its keys
(``m``, ``o``, ``/``, ``enter`` on a node) and the filter box's messages to it; how the run's events reach
the panes stays in the screen.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.containers import Grid
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input

from launcher.api.runs import NodeRow
from tui.frames import draw_soon
from tui.widgets.node_log import NodeLog
from tui.widgets.node_overview import NodeOverview

PANE_MIN_ROWS = 9
"""A node pane shorter than this shows too few lines: the grid then scrolls (tab moves between panes)."""
FILTER_DEBOUNCE_S = 0.15
FILTERING = "-filtering"
"""The screen's class while the filter box is open."""


class MonitorViews:
    """Owns the view state of one run monitor (``merged``, ``overview``, ``alone``), the panes' grid
    layout, the keys' focus within the view shown, and the filter box with its debounce. The screen owns
    the panes themselves (``panes``, shared) and what is written into them."""

    def __init__(self, screen: Screen, panes: dict[int, NodeLog], num_nodes: int,
                 overview_rows: Callable[[], list[NodeRow]]) -> None:
        self.screen, self.panes, self.num_nodes, self.overview_rows = screen, panes, num_nodes, overview_rows
        self.merged = False
        """The all-node view is shown instead of the per-node grid."""
        self.overview = False
        """The node overview is shown instead of the panes (unless the merged view or one node's pane is)."""
        self.alone: int | None = None
        """The node whose pane is shown alone (opened from the overview with ``enter``)."""
        self.filter_timer: Timer | None = None
        """The pending re-filter of the text typed last (typing restarts it)."""

    @property
    def grid(self) -> Grid:
        return self.screen.query_one("#logs", Grid)

    @property
    def overview_widget(self) -> NodeOverview:
        return self.screen.query_one(NodeOverview)

    @property
    def filter_box(self) -> Input:
        return self.screen.query_one("#filter", Input)

    @property
    def filtering(self) -> bool:
        return self.screen.has_class(FILTERING)

    @property
    def overview_shown(self) -> bool:
        return bool(self.overview) and self.alone is None and not self.merged

    def fit_panes(self) -> None:
        """Panes share the grid's height while each keeps ``PANE_MIN_ROWS``; past that, the grid scrolls."""
        grid = self.grid
        if not grid.display or not grid.size.height:  # hidden, or shown again but not laid out yet (no size)
            return
        shown = 1 if self.alone is not None else self.num_nodes
        rows = -(-shown // (1 if shown == 1 else 2))
        rows_css = "1fr" if grid.size.height >= rows * PANE_MIN_ROWS else str(PANE_MIN_ROWS)
        if [str(row) for row in grid.styles.grid_rows or ()] != [rows_css]:  # setting it restyles every pane
            grid.styles.grid_rows = rows_css

    def show_merged(self, merged: bool) -> None:
        self.merged = merged
        self.lay_out()

    def toggle_overview(self) -> None:
        if self.filtering:  # a filter applies to the view it was typed in: not carried over
            self.close_filter()
        self.show_overview(not self.overview_shown)

    def show_overview(self, on: bool) -> None:
        """The overview (``on``) or the panes."""
        self.overview = on
        self.merged, self.alone = False, None
        self.lay_out()
        if on:  # after the frame that shows it: that frame draws the rows as they were (kept), then these
            self.screen.call_after_refresh(self._refresh_overview)

    def _refresh_overview(self) -> None:
        if self.overview_shown:
            self.overview_widget.show(self.overview_rows())

    def show_alone(self, rank: int) -> None:
        """Node ``rank``'s pane alone, full size (``o`` or ``escape`` goes back to the overview)."""
        if not 0 <= rank < self.num_nodes:
            return
        self.alone = rank
        self.lay_out()

    def show_node(self, rank: int, then: Callable[[], None]) -> None:
        """Node ``rank``'s pane, shown (alone when the overview was up); ``then`` once it is mounted."""
        self.merged, self.alone = False, rank if self.overview else None
        self.lay_out(then)

    def lay_out(self, then: Callable[[], None] | None = None) -> None:
        # Display set on the containers (and the panes shown alone) only: a class on the screen would
        # restyle every widget.
        overview = self.overview_shown
        grid = self.grid
        grid.display = not self.merged and not overview
        self.screen.query_one("#merged").display = self.merged
        self.overview_widget.display = overview
        columns = 1 if self.num_nodes == 1 or self.alone is not None else 2
        if grid.styles.grid_size_columns != columns:  # its own style: a class would restyle every pane in it
            grid.styles.grid_size_columns = columns
        for rank in range(self.num_nodes):
            pane = self.panes[rank]
            if pane.parent is not None and pane.display != (self.alone is None or rank == self.alone):
                pane.display = not pane.display
        shown = [self.alone] if self.alone is not None else range(self.num_nodes)
        unmounted = [self.panes[rank] for rank in shown if self.panes[rank].parent is None] if grid.display else []
        if unmounted:
            self.screen.run_worker(self._settle(grid, unmounted, then), group="layout")
        else:  # at once: the frame this switch causes shows the focus moved too
            self._focus_and_fit(then)
        draw_soon(self.screen)

    async def _settle(self, grid: Grid, unmounted: list[NodeLog], then: Callable[[], None] | None) -> None:
        """Mount the panes shown for the first time (in node order), then focus and fit what is shown."""
        await grid.mount(*unmounted)
        grid.sort_children(key=lambda pane: pane.node_rank if isinstance(pane, NodeLog) else 0)
        self._focus_and_fit(then)
        draw_soon(self.screen)

    def _focus_and_fit(self, then: Callable[[], None] | None) -> None:
        self.focus_logs()
        self.fit_panes()
        self.screen.call_after_refresh(self.fit_panes)  # with the grid's height after this switch's layout
        if then is not None:
            then()

    def focus_logs(self) -> None:
        """Keys such as ``end`` and ``pageup`` go to a pane that is shown (never to a hidden one)."""
        if self.overview_shown:
            self.overview_widget.table.focus()
            return
        self.panes[-1 if self.merged else self.alone or 0].focus()

    # -- the filter (``/``) ------------------------------------------------------------------------------

    def open_filter(self) -> None:
        self.screen.add_class(FILTERING)
        box = self.filter_box
        box.disabled = False
        box.focus()

    def filter_typed(self, text: str) -> None:
        """The filter applies as you type (each pane re-filters its kept lines, after a short pause; the
        overview keeps the nodes whose host, state or mark contains the text)."""
        if self.filter_timer is not None:
            self.filter_timer.stop()
        self.filter_timer = self.screen.set_timer(FILTER_DEBOUNCE_S, lambda: self._refilter(text))

    def filter_submitted(self, text: str) -> None:
        self._refilter(text)
        if not text:
            self.close_filter()
        self.focus_logs()

    def _refilter(self, text: str) -> None:
        if self.overview_shown:
            self.overview_widget.set_filter(text)
            return
        for pane in self.panes.values():
            pane.refilter(text)

    def close_filter(self) -> None:
        box = self.filter_box
        if box.value:
            box.value = ""
            self._refilter("")
        self.screen.remove_class(FILTERING)
        box.disabled = True
