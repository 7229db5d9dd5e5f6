"""The app under load: N nodes (8 panes, or past 8 the node overview) streaming lines while keys are pressed.

Reports key-to-screen latency (a key event posted as a terminal's would be, until the first frame
rendered with what the key changed), p50/p95 overall and per key, the app's CPU use and peak memory;
then the time from ``fsdp-tui`` start to its first screen in a real terminal (tmux), and whether torch
was imported.

    .venv/bin/python benchmarks/bench_tui.py [--seconds 60] [--rate 5000] [--nodes 8]
    .venv/bin/python benchmarks/bench_tui.py --nodes 8 64 --total-rate 50000 --seconds 20 --no-start
    .venv/bin/python benchmarks/bench_tui.py --nodes 64 --keys m        (only the view toggle, as before)
    .venv/bin/python benchmarks/bench_tui.py --run RUN --home HOME --seconds 30   (the app on a real run)

``--total-rate`` splits that many lines/s over the nodes (``--rate`` is per node). The keys pressed, one
every ``--gap`` seconds, cycle through a mix of what a user does while watching a run (``--keys`` to
choose): past 8 nodes (the overview) moving in the table, opening a node's pane (``enter``), scrolling
it with following off (``f``), back (``escape``), the merged view (``m``) and a page up in it; at 8
nodes scrolling a pane, the next pane (``tab``), the merged view, the overview (``o``) and a node from
it. Logs are scrolled with following off (a followed log goes back to its end with the next lines).
Each key's frame is the first one drawn after what it changes changed: the view (``m``, ``o``,
``enter``, ``escape``, ``f``, ``tab``), the cursor of the focused table or the scroll position of the
focused log (arrows, ``pageup``, ``pagedown``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZE = (250, 70)
"""The terminal the app runs in (headless)."""
FRAME_DEADLINE_S = 10.0
"""A key whose frame has not come by then means a stuck or crashed app, not a latency."""
OVERVIEW_KEYS = "down down up up enter f pageup pageup pagedown f escape m f pageup f m"
"""Past 8 nodes (the app opens on the overview): each cycle ends where it began."""
PANES_KEYS = "f pageup pageup pagedown up down f tab m f pageup f m o down up enter escape o"
"""Up to 8 nodes (the app opens on the panes, the first one focused)."""


class SyntheticHandle:
    """Stands in for a launch: NodeLines at ``rate`` lines/s per node, in 20 batches a second."""

    def __init__(self, run_id: str, nodes: int, rate: int, seconds: float) -> None:
        self.run_id, self.nodes, self.rate, self.seconds = run_id, nodes, rate, seconds
        self.sent = 0
        self.task = None

    async def events(self):
        from launcher.events import MetricsRecorded, NodeLines, RunState, RunStateChanged
        from trainer.wire.protocol import MetricRecord

        yield RunStateChanged(self.run_id, RunState.RUNNING, 1)
        per_batch = self.rate // 20
        start = time.perf_counter()
        tick = 0
        while time.perf_counter() - start < self.seconds:
            for rank in range(self.nodes):
                lines = tuple(f"[rank{rank}] step={tick} loss={1 / (tick + 1):.4f} " + "x" * 60
                              for _ in range(per_batch))
                self.sent += len(lines)
                yield NodeLines(self.run_id, rank, lines, 0)
            yield MetricsRecorded(self.run_id, MetricRecord(step=tick, loss=1 / (tick + 1), tokens_per_s=1e4))
            tick += 1
            await asyncio.sleep(max(0.0, start + tick / 20 - time.perf_counter()))

    async def cancel(self) -> None:
        pass


KEY_CHARACTERS = {"m": "m", "o": "o", "f": "f", "enter": "\r", "escape": "\x1b", "tab": "\t"}


def what_changes(screen, key: str):
    """(what the key changes, as a function of the screen; whether a value seen in a frame shows it).

    Arrows and pages move the focused table's cursor or scroll the focused log, in their direction (a
    followed log also scrolls by itself, down); every other key changes the view or the focus."""
    from textual.widgets import DataTable

    if key in ("up", "down", "pageup", "pagedown"):
        widget = screen.focused
        if isinstance(widget, DataTable):
            def value():
                return widget.cursor_row
        else:
            def value():
                return widget.view_y if hasattr(widget, "view_y") else widget.scroll_y  # a tree before LogView: Log
        if key in ("up", "pageup"):
            return value, lambda before, now: now < before
        return value, lambda before, now: now > before

    views = getattr(screen, "views", screen)  # which view is shown: MonitorViews' (the screen's before it)

    def view():
        return views.merged, views.overview_shown, views.alone, screen.follow, screen.focused

    return view, lambda before, now: now != before


def percentiles(ms: list[float]) -> str:
    ms = sorted(ms)
    return (f"p50 {statistics.median(ms):.1f} ms, p95 {ms[math.ceil(len(ms) * 0.95) - 1]:.1f} ms, "
            f"max {ms[-1]:.1f} ms ({len(ms)})")


async def press_keys(app, screen, seconds: float, keys: str | None, nodes: int, gap: float) -> dict:
    """Press the keys (one every ``gap`` s, for ``seconds``) on the run monitor ``screen`` of the running
    ``app``; each key's latency and what it was made of, the app's CPU use and its wall time."""
    from textual import events

    # A frame is on screen when the compositor has rendered it: record when that happens, and
    # what the key in flight changes as of that frame (a frame drawn before the poll below
    # notices the change still counts).
    frames: list[tuple[float, float, object]] = []  # (began, drawn, what the key changes)
    probe = [lambda: None]
    original, original_layout = screen._compositor_refresh, screen._refresh_layout
    laid_out: list[float] = []  # when the layout pass of the frame being drawn began

    def render_and_stamp() -> None:
        began = laid_out.pop() if laid_out else time.perf_counter()
        original()
        frames.append((began, time.perf_counter(), probe[0]()))

    def lay_out_and_stamp(*args, **kwargs) -> None:
        laid_out[:] = [time.perf_counter()]
        original_layout(*args, **kwargs)
        laid_out.clear()

    screen._compositor_refresh, screen._refresh_layout = render_and_stamp, lay_out_and_stamp
    cycle = (keys or (OVERVIEW_KEYS if nodes > 8 else PANES_KEYS)).split()
    latencies: list[tuple[str, float]] = []
    parts: list[tuple[str, float, float]] = []
    """(key, its frame's layout and drawing in ms, the time from the key to that frame's start in ms)."""
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    pressed = 0
    while time.perf_counter() - t0 < seconds:
        key = cycle[pressed % len(cycle)]
        pressed += 1
        probe[0], moved = what_changes(screen, key)
        before = probe[0]()
        drawn = len(frames)
        start = time.perf_counter()
        app.post_message(events.Key(key, KEY_CHARACTERS.get(key)))  # as a terminal key press arrives
        while not any(moved(before, now) for _, _, now in frames[drawn:]):
            if time.perf_counter() - start > FRAME_DEADLINE_S or not app.is_running:
                raise SystemExit(f"no frame with what {key!r} changes {FRAME_DEADLINE_S:.0f} s after it "
                                 f"(the app {'is running' if app.is_running else 'has stopped'}): "
                                 "no latency to report")
            await asyncio.sleep(0.001)
        began, at = next((b, t) for b, t, now in frames[drawn:] if moved(before, now))
        latencies.append((key, (at - start) * 1000))
        parts.append((key, (at - began) * 1000, (began - start) * 1000))
        probe[0] = lambda: None
        await asyncio.sleep(gap)
    wall = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    drawing = [(drawn - began) * 1000 for began, drawn, _ in frames if began >= t0]
    return {"latencies": latencies, "parts": parts, "wall": wall, "cpu": cpu, "frames": drawing}


def report(pressed: dict, generator_included: bool) -> None:
    latencies, parts, wall = pressed["latencies"], pressed["parts"], pressed["wall"]
    print(f"key-to-screen latency over {len(latencies)} presses: {percentiles([ms for _, ms in latencies])}")
    for key in dict.fromkeys(k for k, _ in latencies):
        frame = statistics.median(ms for k, ms, _ in parts if k == key)
        wait = statistics.median(ms for k, _, ms in parts if k == key)
        print(f"  {key:>9}: {percentiles([ms for k, ms in latencies if k == key])}; "
              f"median {wait:.1f} ms until its frame began, {frame:.1f} ms laying it out and drawing it")
    frames = sorted(pressed["frames"])
    print(f"frames drawn: {len(frames)} ({len(frames) / wall:.0f}/s), each p50 {statistics.median(frames):.1f} ms, "
          f"p90 {frames[int(len(frames) * 0.9)]:.1f} ms, max {frames[-1]:.1f} ms; {sum(frames) / 1000:.1f} s of "
          f"laying out and drawing in {wall:.0f} s")
    print(f"app CPU: {pressed['cpu'] / wall:.0%} of one core{' (generator included)' if generator_included else ''}; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def python_collector() -> None:
    """``--automatic-gc``: Python's own collection while the app runs, with the thresholds the app used
    before it collected between keys itself (``tui/collector.py``), to compare the two."""
    import gc

    from tui.collector import IdleCollector

    def start(self) -> None:
        gc.collect()
        gc.freeze()
        gc.set_threshold(5_000, 20, 100)

    def stop(self) -> None:
        gc.unfreeze()
        gc.set_threshold(700, 10, 10)

    IdleCollector.start, IdleCollector.stop = start, stop


async def load_test(seconds: float, rate: int, nodes: int, keys: str | None = None, gap: float = 0.25) -> None:
    import tui  # noqa: F401, I001  (first, as the console script: the app's settings apply before Textual loads)

    from launcher.runs.core.store import RunStore
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text
    from tui.app import FsdpTuiApp
    from tui.screens.monitor import RunMonitorScreen

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        hosts = ", ".join(f"h{i}" for i in range(nodes))
        text = f"experiment_name: bench\ncompute: {{hosts: [{hosts}]}}\ncommand: x\n"
        plan = build_plan(validate_text(text, "b.yaml").workload, run_id="bench-run")
        RunStore(home).create_run(plan, None, text)
        from launcher.runs.core.ownership import OwnerLock

        OwnerLock(home / "runs" / "bench-run").acquire()  # owned by this process: nothing adopts it
        handle = SyntheticHandle("bench-run", nodes, rate, seconds)
        app = FsdpTuiApp(home)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            app.push_screen(RunMonitorScreen("bench-run", nodes, events=handle.events()))
            await pilot.pause(0.5)
            screen = app.screen
            pressed = await press_keys(app, screen, seconds, keys, nodes, gap)
            shown = sum(p.line_count if hasattr(p, "line_count") else p.log.line_count  # (a tree before LogView)
                        for p in screen.query("NodeLog"))
            panes = getattr(screen, "panes", None) or {i: p for i, p in enumerate(screen.query("NodeLog"))}
            kept = sum(len(p.pending) + len(p.all_lines) for p in panes.values())  # mounted or not
        wall = pressed["wall"]
        print(f"{nodes} nodes x {rate} lines/s for {wall:.0f} s: {handle.sent:,} lines sent "
              f"({handle.sent / wall:,.0f}/s); lines currently in panes (bounded): {shown:,}; "
              f"kept in buffers: {kept:,}")
        report(pressed, generator_included=True)


async def watch_run(home: Path, run_id: str, seconds: float, keys: str | None, gap: float, as_json: bool) -> None:
    """The app on a real run (``fsdp-tui RUN`` as a user opens it, following the run's record), keys
    pressed as above; ``benchmarks/bench_scale.py --app`` runs this while its nodes stream."""
    import tui  # noqa: F401, I001

    from tui.app import FsdpTuiApp
    from tui.screens.monitor import RunMonitorScreen

    app = FsdpTuiApp(home, run_id=run_id)
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.perf_counter() + 60
        while not isinstance(app.screen, RunMonitorScreen):
            if time.perf_counter() > deadline:
                raise SystemExit(f"the app did not open run {run_id} in 60 s")
            await pilot.pause(0.05)
        screen = app.screen
        # The keys scroll logs: wait until every node has printed more than a pane shows.
        while min((node.lines for node in screen.view.nodes.values()), default=0) < 2 * SIZE[1]:
            if time.perf_counter() > deadline:
                raise SystemExit(f"the nodes of run {run_id} did not print {2 * SIZE[1]} lines each in 60 s")
            await pilot.pause(0.1)
        lines0 = sum(node.lines for node in screen.view.nodes.values())
        pressed = await press_keys(app, screen, seconds, keys, screen.num_nodes, gap)
        lines = sum(node.lines for node in screen.view.nodes.values()) - lines0
    if as_json:
        ms = sorted(ms for _, ms in pressed["latencies"])
        print(json.dumps({"presses": len(ms), "p50_ms": statistics.median(ms),
                          "p95_ms": ms[math.ceil(len(ms) * 0.95) - 1], "max_ms": ms[-1],
                          "cpu_s": pressed["cpu"], "wall_s": pressed["wall"], "lines": lines,
                          "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
        return
    print(f"run {run_id}, {screen.num_nodes} nodes: {lines:,} lines arrived in {pressed['wall']:.0f} s")
    report(pressed, generator_included=False)


def first_screen() -> None:
    if shutil.which("tmux") is None:
        print("tmux not found: start-up time not measured")
        return
    exe = Path(sys.executable).with_name("fsdp-tui")
    times = []
    for i in range(5):
        with tempfile.TemporaryDirectory() as tmp:
            session = f"bench-start-{i}"
            start = time.perf_counter()
            subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40",
                            f"cd {ROOT} && PYTHONPATH={ROOT} FSDP_TUI_HOME={tmp} {exe}"], check=True)
            while True:
                out = subprocess.run(["tmux", "capture-pane", "-t", session, "-p"], capture_output=True,
                                     text=True).stdout
                if "Workloads" in out:
                    times.append(time.perf_counter() - start)
                    break
                if time.perf_counter() - start > 20:
                    raise SystemExit("the app did not show its home screen in 20 s")
                time.sleep(0.01)
            subprocess.run(["tmux", "kill-session", "-t", session])
    code = "import sys, tui.app, tui.screens.home, tui.screens.monitor, tui.screens.editor; print('torch' in sys.modules)"
    torch_loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    print(f"fsdp-tui start to first screen (tmux, 5 runs): median {statistics.median(times) * 1000:.0f} ms, "
          f"max {max(times) * 1000:.0f} ms (floor < 1 s); torch imported by the app: {torch_loaded}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--rate", type=int, default=5000)
    p.add_argument("--total-rate", type=int, default=None, help="lines/s over all nodes (instead of --rate)")
    p.add_argument("--nodes", type=int, nargs="+", default=[8])
    p.add_argument("--no-start", action="store_true", help="skip the start-to-first-screen measurement")
    p.add_argument("--keys", default=None, help="the keys pressed, in turn, space-separated (default: a mix, "
                   "see the module's doc)")
    p.add_argument("--gap", type=float, default=0.25, help="seconds between a key's frame and the next key")
    p.add_argument("--run", default=None, help="watch this real run (of --home) instead of synthetic nodes")
    p.add_argument("--home", type=Path, default=None, help="with --run: the fsdp-tui home that records it")
    p.add_argument("--json", action="store_true", help="with --run: one JSON line")
    p.add_argument("--automatic-gc", action="store_true", help="Python's own garbage collection instead of the "
                   "app's (to compare)")
    args = p.parse_args()
    if args.automatic_gc:
        python_collector()
    if args.run:
        if args.home is None:
            p.error("--run needs --home")
        asyncio.run(watch_run(args.home, args.run, args.seconds, args.keys, args.gap, args.json))
        return
    for nodes in args.nodes:
        rate = args.total_rate // nodes if args.total_rate else args.rate
        asyncio.run(load_test(args.seconds, rate, nodes, args.keys, args.gap))
    if not args.no_start:
        first_screen()


if __name__ == "__main__":
    main()
