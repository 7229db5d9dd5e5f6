"""Streaming throughput: 8 nodes on this machine each print lines as fast as they can; the launcher
tails every node log into the local mirror. Reports lines/s in total, checks none is lost, and the
launcher's CPU use (user+sys seconds per wall second) while doing it.

    .venv/bin/python benchmarks/bench_streaming.py [--nodes 8] [--lines 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path


async def run(nodes: int, lines: int) -> None:
    from launcher.paths import new_run_id
    from launcher.runs.launch import create_run
    from launcher.runs.owner.supervisor import Supervisor
    from launcher.runs.read.follower import follow_run
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        script = (f"import sys\nw = sys.stdout.write\nfor i in range({lines}):\n"
                  f"    w(f'node $NODE_RANK line {{i}} ' + 'x' * 60 + chr(10))\n")
        text = (f"experiment_name: stream\ncompute: {{hosts: [{', '.join(['localhost'] * nodes)}]}}\n"
                "mlflow: {enabled: false}\ncommand: |\n  python -c \"$SCRIPT\"\n"
                f"env_variables:\n  SCRIPT: {json.dumps(script)}\n")
        result = validate_text(text, "stream.yaml")
        assert result.workload is not None, [p.format() for p in result.problems]
        plan = build_plan(result.workload, run_id=new_run_id("stream"), node_root=str(home / "nodes"))
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        # The run's owner and a follower (what `run --json` shows), both in this process so both are measured.
        create_run(plan, home)
        owner = asyncio.create_task(Supervisor(home, plan.run_id, plan, adopted=False).run())
        received = 0
        async for event in follow_run(home, plan.run_id, tail_bytes=None, adopt=False):
            if type(event).__name__ == "NodeLines":
                received += len(event.lines)
        await owner
        wall = time.perf_counter() - start
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
        mirrored = sum(len((home / "runs" / plan.run_id / "nodes" / f"{r}.log").read_text().splitlines())
                       for r in range(nodes))
        expected = nodes * lines
        print(f"{nodes} nodes x {lines} lines = {expected} lines in {wall:.1f} s (from launch to the end)")
        print(f"received as events: {received}; in the local mirror: {mirrored}; lost: {expected - mirrored}")
        print(f"throughput: {mirrored / wall:,.0f} lines/s in total (floor 20,000); "
              f"owner + follower CPU: {cpu / wall:.0%} of one core")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--lines", type=int, default=200_000)
    args = p.parse_args()
    asyncio.run(run(args.nodes, args.lines))


if __name__ == "__main__":
    main()
