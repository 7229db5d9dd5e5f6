"""The app under load: N nodes (8 panes, or past 8 the node overview) streaming lines while keys are pressed.

Reports p50/p95 key-to-screen latency (a key event posted as a terminal's would be, until the first
frame rendered after its action ran),
the app's CPU use and peak memory; then the time from ``fsdp-tui`` start to its first screen in a
real terminal (tmux), and whether torch was imported.

    .venv/bin/python benchmarks/bench_tui.py [--seconds 60] [--rate 5000] [--nodes 8]
    .venv/bin/python benchmarks/bench_tui.py --nodes 8 64 --total-rate 50000 --seconds 30   (side by side)

``--total-rate`` splits that many lines/s over the nodes (``--rate`` is per node). The key pressed is ``m``
(the merged view and back: panes at 8 nodes, the overview at 64).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAME_DEADLINE_S = 10.0
"""A key whose frame has not come by then means a stuck or crashed app, not a latency."""


class SyntheticHandle:
    """Stands in for a launch: NodeLines at ``rate`` lines/s per node, in 20 batches a second."""

    def __init__(self, run_id: str, nodes: int, rate: int, seconds: float) -> None:
        self.run_id, self.nodes, self.rate, self.seconds = run_id, nodes, rate, seconds
        self.sent = 0
        self.task = None

    async def events(self):
        from launcher.events import MetricsRecorded, NodeLines, RunState, RunStateChanged
        from trainer.protocol import MetricRecord

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


async def load_test(seconds: float, rate: int, nodes: int) -> None:
    from textual import events

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
        latencies = []
        async with app.run_test(size=(250, 70)) as pilot:
            await pilot.pause()
            app.push_screen(RunMonitorScreen("bench-run", nodes, events=handle.events()))
            await pilot.pause(0.5)
            screen = app.screen
            # A frame is on screen when the compositor has rendered it: record when that happens, and
            # which view it drew (a frame drawn before the poll below notices the toggle still counts).
            frames: list[tuple[float, bool]] = []
            original = screen._compositor_refresh

            def render_and_stamp() -> None:
                original()
                frames.append((time.perf_counter(), screen.merged))

            screen._compositor_refresh = render_and_stamp
            usage0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                before = screen.merged
                drawn = len(frames)
                start = time.perf_counter()
                app.post_message(events.Key("m", "m"))  # as a terminal key press arrives
                while not any(merged != before for _, merged in frames[drawn:]):
                    if time.perf_counter() - start > FRAME_DEADLINE_S or not app.is_running:
                        raise SystemExit(f"no frame with the toggled view {FRAME_DEADLINE_S:.0f} s after a key "
                                         f"(the app {'is running' if app.is_running else 'has stopped'}): "
                                         "no latency to report")
                    await asyncio.sleep(0.001)
                latencies.append((next(t for t, merged in frames[drawn:] if merged != before) - start) * 1000)
                await asyncio.sleep(0.25)
            wall = time.perf_counter() - t0
            usage1 = resource.getrusage(resource.RUSAGE_SELF)
            shown = sum(p.log.line_count for p in screen.query("NodeLog"))
            panes = getattr(screen, "panes", None) or {i: p for i, p in enumerate(screen.query("NodeLog"))}
            kept = sum(len(p.pending) + len(p.all_lines) for p in panes.values())  # mounted or not
        cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
        latencies.sort()
        print(f"{nodes} nodes x {rate} lines/s for {wall:.0f} s: {handle.sent:,} lines sent "
              f"({handle.sent / wall:,.0f}/s); lines currently in panes (bounded): {shown:,}; "
              f"kept in buffers: {kept:,}")
        print(f"key-to-screen latency over {len(latencies)} presses: p50 {statistics.median(latencies):.1f} ms, "
              f"p95 {latencies[int(len(latencies) * 0.95) - 1]:.1f} ms (floor < 100 ms)")
        print(f"app CPU: {cpu / wall:.0%} of one core (generator included); "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


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
    args = p.parse_args()
    for nodes in args.nodes:
        rate = args.total_rate // nodes if args.total_rate else args.rate
        asyncio.run(load_test(args.seconds, rate, nodes))
    if not args.no_start:
        first_screen()


if __name__ == "__main__":
    main()
