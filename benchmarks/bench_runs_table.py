"""The home screen's runs table refreshed while runs are live (every 2 s): the table built whole again, as it
was, against only the moved cells written in place. 500 runs (the window the home screen holds), some live;
each refresh moves the live runs' step and loss; timed from the call until the next frame is drawn.

    .venv/bin/python benchmarks/bench_runs_table.py [--runs 500] [--live 1 10] [--repeat 30]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


async def refreshes(runs: int, live: int, repeat: int) -> dict[str, float]:
    from textual.app import App, ComposeResult

    from launcher.events import RunState
    from launcher.runs.core.run_records import RunSummary
    from tui.widgets.runs_table import RunsTable

    class Home(App):
        def compose(self) -> ComposeResult:
            yield RunsTable()

    t0 = 1_790_000_000.0
    shown = [RunSummary(run_id=f"20261202-{i:06d}-exp-{i:04x}", experiment=f"exp{i % 7}",
                        state=RunState.RUNNING if i < live else RunState.SUCCEEDED, attempt=1, num_nodes=2,
                        hosts=("a", "b"), started_at=t0 + i, ended_at=None if i < live else t0 + i + 600,
                        last_loss=1.5, best_eval_loss=1.4, step=10, max_steps=1000, workload_path=None)
             for i in range(runs)]
    medians = {}
    app = Home()
    async with app.run_test(size=(200, 50)) as pilot:
        table = app.query_one(RunsTable)
        table.show(shown)
        await pilot.pause()
        for way in ("whole", "in place"):
            took = []
            for n in range(repeat):
                shown = [dataclasses.replace(r, step=(r.step or 0) + 1, last_loss=1.5 - n / 1000) if i < live else r
                         for i, r in enumerate(shown)]
                start = time.perf_counter()
                table.runs = shown
                table.rebuild_all() if way == "whole" else table.show(shown)
                await pilot.pause()
                took.append((time.perf_counter() - start) * 1000)
            medians[way] = statistics.median(took)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--live", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print(f"{args.runs} runs, median of {args.repeat} refreshes each, ms from the call to the next frame")
    print("live | built whole | in place | whole / in place")
    for live in args.live:
        got = asyncio.run(refreshes(args.runs, live, args.repeat))
        print(f"{live:4d} | {got['whole']:11.1f} | {got['in place']:8.1f} | {got['whole'] / got['in place']:.1f}x")


if __name__ == "__main__":
    main()
