"""``fsdp-tui cancel RUN``: stop every process of a run on every node."""

from __future__ import annotations

import argparse
import sys

from launcher.commands import find_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cancel", help="stop a run on all its nodes (SIGTERM, grace, SIGKILL, sweep)")
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.session import cancel_run

    found = find_run("cancel", args.run_id)
    if found is None:
        return 2
    store, run_id = found
    results = cancel_run(run_id, home=store.home)
    left = {rank: r.get("left") for rank, r in results.items() if r.get("left")}
    if left:
        for rank, pids in left.items():
            print(f"node {rank}: processes still alive after SIGKILL: {pids}", file=sys.stderr)
        return 1
    print(f"run {run_id}: stopped on {len(results)} node(s)")
    return 0
