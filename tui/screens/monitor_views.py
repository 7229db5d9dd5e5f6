"""Which of the run monitor's views is shown: the node panes (all, or one node's alone), the merged
all-node pane, or the node overview; where the keys go; and the filter, which applies to the view shown.

A part of :class:`tui.screens.monitor.RunMonitorScreen` (its state: ``merged``, ``overview``, ``alone``,
``panes``), kept apart from how the run's events reach the panes.
"""

from __future__ import annotations

from textual.containers import Grid
from textual.widgets import Input

from tui.widgets.node_log import NodeLog
from tui.widgets.node_overview import NodeOverview

PANE_MIN_ROWS = 9
"""A node pane shorter than this shows too few lines: the grid then scrolls (tab moves between panes)."""
FILTER_DEBOUNCE_S = 0.15


class MonitorViews:
    """The run monitor's view switching (``m``, ``o``, ``enter`` on a node) and its filter (``/``)."""

    def fit_panes(self) -> None:
        """Panes share the grid's height while each keeps ``PANE_MIN_ROWS``; past that, the grid scrolls."""
        grid = self.query_one("#logs", Grid)
        if not grid.display or not grid.size.height:  # hidden, or shown again but not laid out yet (no size)
            return
        shown = 1 if self.alone is not None else self.num_nodes
        rows = -(-shown // (1 if shown == 1 else 2))
        rows_css = "1fr" if grid.size.height >= rows * PANE_MIN_ROWS else str(PANE_MIN_ROWS)
        if [str(row) for row in grid.styles.grid_rows or ()] != [rows_css]:  # setting it restyles every pane
            grid.styles.grid_rows = rows_css

    def action_merged(self) -> None:
        self.show_merged(not self.merged)

    def show_merged(self, merged: bool) -> None:
        self.merged = merged
        self._lay_out()

    @property
    def overview_shown(self) -> bool:
        return bool(self.overview) and self.alone is None and not self.merged

    def action_overview(self) -> None:
        if self.has_class("-filtering"):  # a filter applies to the view it was typed in: not carried over
            self._close_filter()
        self.show_overview(not self.overview_shown)

    def show_overview(self, on: bool) -> None:
        """The overview (``on``) or the panes."""
        self.overview = on
        self.merged, self.alone = False, None
        self._lay_out()
        if on:  # after the frame that shows it: that frame draws the rows as they were (kept), then these
            self.call_after_refresh(self._refresh_overview)

    def _refresh_overview(self) -> None:
        if self.overview_shown:
            self.query_one(NodeOverview).show(self.overview_rows())

    def on_node_overview_node_chosen(self, event: NodeOverview.NodeChosen) -> None:
        """That node's pane alone, full size (``o`` or ``escape`` goes back to the overview)."""
        if not 0 <= event.node_rank < self.num_nodes:
            return
        self.alone = event.node_rank
        self._lay_out()

    def _lay_out(self, then=None) -> None:
        # Display set on the containers (and the panes shown alone) only: a class on the screen would
        # restyle every widget.
        overview = self.overview_shown
        self.query_one("#logs").display = not self.merged and not overview
        self.query_one("#merged").display = self.merged
        self.query_one(NodeOverview).display = overview
        grid = self.query_one("#logs", Grid)
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
            self.run_worker(self._settle(grid, unmounted, then), group="layout")
        else:  # at once: the frame this switch causes shows the focus moved too
            self._focus_and_fit(then)

    async def _settle(self, grid: Grid, unmounted: list[NodeLog], then) -> None:
        """Mount the panes shown for the first time (in node order), then focus and fit what is shown."""
        await grid.mount(*unmounted)
        grid.sort_children(key=lambda pane: pane.node_rank)
        self._focus_and_fit(then)

    def _focus_and_fit(self, then) -> None:
        self.focus_logs()
        self.fit_panes()
        self.call_after_refresh(self.fit_panes)  # with the grid's height after this switch's layout
        if then is not None:
            then()

    def focus_logs(self) -> None:
        """Keys such as ``end`` and ``pageup`` go to a pane that is shown (never to a hidden one)."""
        if self.overview_shown:
            self.query_one(NodeOverview).table.focus()
            return
        self.pane(-1 if self.merged else self.alone or 0).focus()

    def action_filter(self) -> None:
        self.add_class("-filtering")
        box = self.query_one("#filter", Input)
        box.disabled = False
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        """The filter applies as you type (each pane re-filters its kept lines, after a short pause; the
        overview keeps the nodes whose host, state or mark contains the text)."""
        if self.filter_timer is not None:
            self.filter_timer.stop()
        self.filter_timer = self.set_timer(FILTER_DEBOUNCE_S, lambda: self._refilter(event.value))

    def _refilter(self, text: str) -> None:
        if self.overview_shown:
            self.query_one(NodeOverview).set_filter(text)
            return
        for pane in self.panes.values():
            pane.refilter(text)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._refilter(event.value)
        if not event.value:
            self._close_filter()
        self.focus_logs()

    def _close_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.value:
            box.value = ""
            self._refilter("")
        self.remove_class("-filtering")
        box.disabled = True
