"""The monitor's node overview under Pilot, fed recorded events: it opens past 8 nodes, sorts by any
column and back, filters by text and to the odd nodes, marks the odd node in words, and ``enter`` opens
that node's pane alone (``escape`` back); ``o`` switches between the overview and the panes."""

from __future__ import annotations

from launcher.events import NodeLines, NodeState, NodeStateChanged, NodeUsage, RunState, RunStateChanged
from tests.support.tui import FedEvents, wait_for
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen
from tui.widgets.node_overview import COLUMNS, NodeOverview

ODD = [c.title for c in COLUMNS].index("odd")

STARVED = 5
"""The node whose CPU sits idle while the others work (a cgroup quota, say)."""


def run_events(nodes: int, starved: int | None = STARVED, lines: int = 20):
    out = [RunStateChanged("r", RunState.RUNNING, 1)]
    for rank in range(nodes):
        out.append(NodeStateChanged("r", rank, f"host-{rank}", NodeState.RUNNING))
        out.append(NodeLines("r", rank, tuple(f"node {rank} line {i}" for i in range(lines + rank)), 0))
        out.append(NodeUsage("r", rank, 4.0 if rank == starved else 100.0 + rank % 3, 900.0 + 10 * rank, 3, 0.0))
    return out


def _rows(count: int, lines=lambda n: 100 + n, host: str = "host-", odd: dict | None = None):
    """``count`` running nodes' rows for the overview alone (``lines``: node -> its line count; ``odd``:
    node -> its marks)."""
    from launcher.runs.read.nodes import NodeRow

    return [NodeRow(n, f"{host}{n}", "running", None, lines(n), 1.5 * n, 0.0, 90.0, 900.0, None, None, None,
                    odd=(odd or {}).get(n, ())) for n in range(count)]


def _bare_overview():
    """An app holding the overview and nothing else."""
    from textual.app import App

    class Bare(App):
        def compose(self):
            yield NodeOverview()

    return Bare()


def _column(table, index: int) -> list[str]:
    return [str(table.get_row_at(i)[index]) for i in range(table.row_count)]


async def test_overview_sorts_filters_marks_and_opens_a_node(home):
    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = RunMonitorScreen("r", 12, events=FedEvents(run_events(12)))
        await app.push_screen(screen)
        overview = screen.query_one(NodeOverview)
        table = overview.table
        await wait_for(pilot, lambda: screen.views.overview_shown and table.row_count == 12
                       and _column(table, 7)[STARVED] == "4" and _column(table, 7)[11] == "102", timeout=120)
        # (node 11's CPU is the last event: a table drawn mid-stream marks the nodes not heard from yet)
        assert not screen.query_one("#logs").display, "past 8 nodes the overview replaces the panes"
        assert screen.focused is table
        assert _column(table, 0) == [str(n) for n in range(12)]
        marks = _column(table, ODD)
        assert marks[STARVED] == "CPU 4% while the others work (others: 101%)"
        assert [m for i, m in enumerate(marks) if i != STARVED] == [""] * 11
        assert table.get_row_at(STARVED)[1].style == "bold red" and not table.get_row_at(0)[1].style
        assert "1 odd" in str(overview.query_one("#overview-says").render())

        await pilot.press(*"n" * 7)  # node, host, state, exit, lines, lines/s, quiet -> CPU%
        assert overview.sort_column == 7
        assert _column(table, 0)[0] == str(STARVED), "the idle CPU first, ascending"
        await pilot.press("v")
        assert _column(table, 0)[-1] == str(STARVED)
        await pilot.press(*"n" * 5)  # RSS, GPU%, GPU GiB, step, step s
        await pilot.press("n")  # odd: the marked node sorts by how many marks it has
        assert _column(table, 0)[0] == str(STARVED)
        await pilot.press("n", "v")  # node again, ascending
        assert _column(table, 0) == [str(n) for n in range(12)]
        await pilot.press("n", "v")  # host, descending: text order
        assert _column(table, 1)[:3] == ["host-9", "host-8", "host-7"]

        await pilot.press("slash", *"host-1", "enter")
        await wait_for(pilot, lambda: table.row_count == 3)
        assert sorted(_column(table, 1)) == ["host-1", "host-10", "host-11"]
        await pilot.press("escape")  # clears the filter
        await wait_for(pilot, lambda: table.row_count == 12)
        await pilot.press("x")
        assert _column(table, 0) == [str(STARVED)]
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.views.alone == STARVED)
        pane = screen.pane(STARVED)
        await wait_for(pilot, lambda: pane.is_on_screen and pane.line_count == 20 + STARVED)
        assert not screen.pane(0).is_on_screen and not overview.display
        assert pane.lines[0] == f"node {STARVED} line 0" and screen.focused is pane
        await pilot.press("escape")
        assert screen.views.overview_shown and screen.focused is table and table.row_count == 1
        await pilot.press("x", "o")
        assert not screen.views.overview_shown and screen.query_one("#logs").display
        await wait_for(pilot, lambda: all(screen.pane(n).is_on_screen for n in range(12)))
        await wait_for(pilot, lambda: screen.pane(11).line_count == 31)  # what it buffered unmounted
        await pilot.press("o")
        assert screen.views.overview_shown


async def test_few_nodes_keep_their_panes_and_o_opens_the_overview(home):
    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = RunMonitorScreen("r", 2, events=FedEvents(run_events(2, starved=None), more=False))
        await app.push_screen(screen)
        await wait_for(pilot, lambda: screen.pane(1).line_count == 21, timeout=120)
        assert not screen.views.overview_shown
        await wait_for(pilot, lambda: "merged" in [k.description for k in screen.query("FooterKey")])
        await pilot.pause(0.5)  # the footer settles after the screen's first focus changes
        footer_keys = list(screen.query("FooterKey"))
        await pilot.press("m")  # focus moves from one log to another: the footer's keys stay as they are
        await wait_for(pilot, lambda: screen.focused is screen.pane(-1))
        await pilot.pause(0.2)
        assert list(screen.query("FooterKey")) == footer_keys
        await pilot.press("m", "o")
        table = screen.query_one(NodeOverview).table
        await wait_for(pilot, lambda: table.row_count == 2)
        assert _column(table, ODD) == ["", ""], "two even nodes: nothing is odd"

        def shown() -> list[str]:
            return [k.description for k in screen.query("FooterKey") if k.display]

        await wait_for(pilot, lambda: "sort" in shown())
        # Back to the panes and to the overview again: the footer hides and shows the overview's keys,
        # it does not compose its keys again (a recompose restyles every key: slow on a busy monitor).
        footer_keys = list(screen.query("FooterKey"))
        await pilot.press("o")
        await wait_for(pilot, lambda: "sort" not in shown() and "merged" in shown())
        await pilot.press("o")
        await wait_for(pilot, lambda: shown()[:3] == ["sort", "reverse", "odd only"])
        assert list(screen.query("FooterKey")) == footer_keys


def test_overview_of_64_nodes_snapshot(snap_compare, home, monkeypatch):
    """64 nodes at a fixed clock: node 7 quiet for 60 s, node 40's CPU idle, node 21's memory far above;
    sorted by the marks, so the odd nodes lead."""
    from types import SimpleNamespace

    clock = [1_772_355_600.0]
    fake = SimpleNamespace(time=lambda: clock[0])
    monkeypatch.setattr("tui.screens.monitor.time", fake)
    monkeypatch.setattr("launcher.runs.read.view.time", fake)

    async def timed():
        yield RunStateChanged("r", RunState.RUNNING, 1)
        for rank in range(64):
            yield NodeStateChanged("r", rank, f"gpu-node-{rank:02d}", NodeState.RUNNING)
        clock[0] += 40
        yield NodeLines("r", 7, tuple(f"step {i}" for i in range(60)), 0)
        clock[0] += 60
        for rank in range(64):
            if rank != 7:
                yield NodeLines("r", rank, tuple(f"step {i}" for i in range(60 + rank % 4)), 0)
            cpu = 3.0 if rank == 40 else 95.0 + rank % 7
            yield NodeUsage("r", rank, cpu, 9000.0 if rank == 21 else 2000.0 + 3 * rank, 9, 0.0)

    app = FsdpTuiApp(home)

    async def ready(pilot) -> None:
        screen = RunMonitorScreen("r", 64, events=timed())
        await app.push_screen(screen)
        overview = screen.query_one(NodeOverview)
        await wait_for(pilot, lambda: overview.table.row_count == 64 and screen.view.node(63).usage is not None,
                       timeout=120)
        overview.sort_by("odd", reverse=True)
        last = ["63", "gpu-node-63", "running", "-", "63", "2.1", "0 s", "95", "2,189"]  # drawn after every event
        await wait_for(pilot, lambda: _column(overview.table, 0)[:3] == ["7", "21", "40"]
                       and [str(c) for c in overview.table.get_row("63")[:9]] == last
                       and "elapsed 1:40" in str(screen.query_one("#summary").render()), timeout=120)
        overview.table.move_cursor(row=5, animate=False)  # on an even node: the odd rows show their colour
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 48), run_before=ready)


async def test_overview_table_kept_lines_match_a_fresh_render():
    """The table reuses a row's rendered line and cells while they read the same: after cells change, the
    cursor moves and the focus leaves, every line drawn equals the same line rendered from scratch."""
    def rows(lines: int):
        return _rows(12, lambda n: lines + n)

    app = _bare_overview()
    async with app.run_test(size=(150, 20)) as pilot:
        overview = app.query_one(NodeOverview)
        table = overview.table
        overview.show(rows(100))
        await pilot.pause()

        def drawn() -> list[list]:
            return [list(table.render_line(y)) for y in range(table.size.height)]

        def fresh() -> list[list]:
            table._clear_caches()
            return drawn()

        first = drawn()
        overview.show(rows(2_000))  # the lines column widens and changes on every row
        await pilot.pause()
        kept = drawn()
        assert kept == fresh() and kept != first
        assert "2,005" in "".join(seg.text for seg in kept[6])
        table.move_cursor(row=3, animate=False)
        await pilot.pause()
        assert drawn() == fresh()
        table.blur()
        await pilot.pause()
        kept = drawn()
        assert kept == fresh()
        overview.show(rows(2_000)[:5] + [rows(2_001)[5]] + rows(2_000)[6:])  # one cell of one row
        await pilot.pause()
        assert drawn() == fresh()


async def test_overview_cells_drawn_as_segments_match_datatables_own():
    """A cell built from segments looks exactly as DataTable's own rendering through Rich draws it:
    same characters, same styles, on odd (coloured) and even rows, under the cursor, with and without
    focus (it fails with the cursor's, the row's or the cell's own style left out)."""
    from launcher.runs.read.nodes import OddMark
    from tui.widgets.row_table import RowTable

    def rows():
        return _rows(6, odd={2: (OddMark("quiet", 60.0, 0.0, "no output for 60 s (others: 0 s)"),)})

    def cells(table) -> list[list[tuple[str, object]]]:
        table._clear_caches()
        return [[(ch, seg.style) for seg in table.render_line(y) for ch in seg.text]
                for y in range(table.size.height)]

    app = _bare_overview()
    async with app.run_test(size=(150, 10)) as pilot:
        overview = app.query_one(NodeOverview)
        table = overview.table
        overview.show(rows())
        table.focus()
        table.move_cursor(row=2, animate=False)
        await pilot.pause()
        for focused in (True, False):
            if not focused:
                table.blur()
                await pilot.pause()
            ours = cells(table)
            RowTable.PLAIN = False
            try:
                theirs = cells(table)
            finally:
                RowTable.PLAIN = True
            assert "no output for 60 s" in "".join(ch for ch, _ in ours[3])
            assert ours == theirs


async def test_overview_header_follows_columns_that_widen():
    """A column widened after its header was drawn (DataTable measures cells when idle, and a frame may
    come first) draws its header at the new width: DataTable keeps drawn lines by an update counter that
    widening leaves alone, so the header kept its old widths while the rows below had the new ones (the
    64-node snapshot differed now and then under load)."""
    def rows(host: str):
        return _rows(3, lambda n: 10, host=host)

    app = _bare_overview()
    async with app.run_test(size=(150, 10)) as pilot:
        overview = app.query_one(NodeOverview)
        table = overview.table
        overview.show(rows("h"))
        await pilot.pause()
        overview.show(rows("a-much-longer-host-name-"))
        table.render_line(0)  # a frame before the table measured its new cells
        await pilot.pause()
        header = list(table.render_line(0))
        table._clear_caches()
        assert header == list(table.render_line(0))
        assert "".join(s.text for s in header).index("state") > len("a-much-longer-host-name-2")
