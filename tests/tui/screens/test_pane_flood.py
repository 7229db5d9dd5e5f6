"""The node panes never drop a line silently: at any rate and load, every line a node wrote is either in
its pane or counted by a note that stands exactly where the lines are missing. The real app under Pilot
follows a run's record (the follower, the panes' buffers and flushes) while a thread appends numbered lines
to two nodes' log mirrors in uneven chunks, at several rates, with both cores kept busy; partway, a screen
the merged view hides the node panes (they wait unseen, their buffers overflow) and goes again."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest

from launcher.events import RunState
from tests.support.tui import RecordedRun, record, wait_for
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen

LINE = re.compile(r"(?:\[\d\] )?n(\d+) step=(\d+)")
NOTE = re.compile(r"^(?:\[\d\] )?··· ([\d,]+) (?:earlier )?lines? not shown")


def account(lines: list[str], node: int, written: int) -> None:
    """Every number ``0..written-1`` of ``node`` is shown once, in order, or inside the count of the note
    right before the next shown one (a note at the end counts lines nobody will see until more come)."""
    expected, owed = 0, 0
    for line in lines:
        note = NOTE.match(line)
        if note:
            owed += int(note.group(1).replace(",", ""))
            continue
        found = LINE.match(line)
        if found is None or int(found.group(1)) != node:
            continue
        step = int(found.group(2))
        assert step == expected + owed, f"node {node}: after {expected - 1} came {step}, {owed} noted"
        expected, owed = step + 1, 0
    assert expected + owed == written, f"node {node}: {expected} shown or noted in order, {written} written"


@pytest.fixture
def busy():
    """Both cores busy, as the machine was under the others' tests."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for p in loops:
        p.kill()
        p.wait()


BUFFER = 16
"""The panes' buffer in these tests: small, so that it overflows within a few seconds even at 10 lines/s."""


@pytest.mark.slow
@pytest.mark.parametrize(("rate", "seconds"), [(10, 5.0), (200, 2.0), (5_000, 1.0)])
async def test_every_line_is_shown_or_counted_at_any_rate_under_load(home, busy, rate, seconds, monkeypatch):
    import tui.screens.monitor as monitor

    monkeypatch.setattr(monitor, "MAX_PENDING", BUFFER)  # a small buffer: it overflows within the test
    run = RecordedRun(f"flood-{rate}", "flood", RunState.RUNNING, 2, 0)
    directory = record(home, run)
    mirrors = [directory / "nodes" / f"{rank}.log" for rank in (0, 1)]
    written = [0, 0]
    go, covered = threading.Event(), threading.Event()
    progress = [0]

    def writer() -> None:
        go.wait()
        files = [open(path, "ab", buffering=0) for path in mirrors]  # noqa: SIM115
        pending = [b"", b""]
        total, per_tick = int(rate * seconds), max(1, rate // 100)  # ticks of 10 ms, however busy the machine
        for n in range(total):
            for rank in (0, 1):
                pending[rank] += f"n{rank} step={n} loss=1.23\n".encode()
            if n % per_tick == per_tick - 1:
                for rank in (0, 1):  # uneven chunks: a line is sometimes cut in two
                    cut = len(pending[rank]) - (5 if n % 3 == 0 else 0)
                    files[rank].write(pending[rank][:cut])
                    pending[rank] = pending[rank][cut:]
                time.sleep(0.01 * per_tick * 100 / rate)
            progress[0] = n
            if n == total // 3:
                covered.set()
        for rank in (0, 1):
            files[rank].write(pending[rank])
            files[rank].close()
            written[rank] = total

    thread = threading.Thread(target=writer)
    thread.start()
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 44)) as pilot:
        screen = RunMonitorScreen(run.run_id, 2)
        await app.push_screen(screen)
        go.set()
        await wait_for(pilot, covered.is_set, timeout=60)
        await pilot.press("m")  # the merged view: the node panes are hidden, their buffers overflow
        mark = progress[0]  # more lines than the buffer holds arrive unseen (or the run's lines end)
        await wait_for(pilot, lambda: progress[0] >= mark + BUFFER * 3 // 2 or not thread.is_alive(), timeout=120)
        await pilot.press("m")  # the panes again
        await wait_for(pilot, lambda: not thread.is_alive(), timeout=120)
        panes = screen.pane(0), screen.pane(1), screen.pane(-1)

        def settled() -> bool:
            ends = [f"n{rank} step={written[rank] - 1} " for rank in (0, 1)]
            return all(p.lines and ends[rank] in p.lines[-1] for rank, p in enumerate(panes[:2]))

        await wait_for(pilot, settled, timeout=60)
        for rank in (0, 1):
            account(list(panes[rank].lines), rank, written[rank])
        await pilot.press("m")  # the merged view once more: what its buffer kept meanwhile, noted
        await wait_for(pilot, lambda: bool(panes[2].lines) and not panes[2].pending, timeout=60)
        merged = list(panes[2].lines)  # both nodes' lines, each note counting both: the total is exact
        shown = sum(1 for line in merged if LINE.match(line))
        noted = sum(int(m.group(1).replace(",", "")) for line in merged if (m := NOTE.match(line)))
        assert shown + noted == sum(written), (shown, noted, written)


async def test_a_covered_pane_counts_what_its_full_buffer_let_go(home, monkeypatch):
    """Without load: lines that come while a pane is hidden (the merged view shown) overflow its buffer; the
    note when it shows again counts them, and still stands where they are missing after a filter is cleared."""
    import tui.screens.monitor as monitor
    from launcher.events import NodeLines
    from tests.support.tui import FedEvents

    monkeypatch.setattr(monitor, "MAX_PENDING", 40)
    run = FedEvents()
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 44)) as pilot:
        screen = RunMonitorScreen("r", 1, events=run)
        await app.push_screen(screen)
        pane = screen.pane(0)
        run.put(NodeLines("r", 0, tuple(f"n0 step={i}" for i in range(10)), 1))
        await wait_for(pilot, lambda: pane.line_count == 10)
        await pilot.press("m")  # the merged view: the node's pane is hidden
        run.put(*(NodeLines("r", 0, (f"n0 step={i}",), 2) for i in range(10, 110)))
        await wait_for(pilot, lambda: screen.view.node(0).lines == 110)
        await pilot.press("m")
        await wait_for(pilot, lambda: pane.lines[-1] == "n0 step=109")
        assert list(pane.lines)[10] == "··· 60 lines not shown (fast output; all are in the node log)"
        account(list(pane.lines), 0, 110)
        await pilot.press("slash", *"step", "enter")
        await pilot.press("escape")  # the filter cleared: the kept lines again, the note where it was
        await wait_for(pilot, lambda: not screen.views.filtering and pane.line_count == 51)
        account(list(pane.lines), 0, 110)


async def test_lines_that_leave_the_top_of_a_full_pane_are_counted_in_its_border(home, monkeypatch):
    import tui.widgets.node_log as node_log
    from launcher.events import NodeLines
    from tests.support.tui import FedEvents

    monkeypatch.setattr(node_log, "MAX_LINES", 30)
    run = FedEvents()
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 44)) as pilot:
        screen = RunMonitorScreen("r", 1, events=run)
        await app.push_screen(screen)
        pane = screen.pane(0)
        for start in range(0, 100, 20):
            run.put(NodeLines("r", 0, tuple(f"n0 step={i}" for i in range(start, start + 20)), start))
            await wait_for(pilot, lambda start=start: pane.lines and pane.lines[-1] == f"n0 step={start + 19}")
        assert pane.line_count == 30 and pane.lines[0] == "n0 step=70"
        assert str(pane.border_subtitle) == "··· 70 earlier lines left the pane (all are in the node log)"
