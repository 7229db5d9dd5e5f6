"""``fsdp-tui cancel RUN``: stop every process of a run on every node."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cancel", help="stop a run on all its nodes (SIGTERM, grace, SIGKILL, sweep)")
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.paths import data_home
    from launcher.session import cancel_run
    from launcher.store import RunStore

    home = data_home()
    try:
        run_id = RunStore(home).find(args.run_id)
    except LookupError as err:
        print(f"fsdp-tui cancel: {err}", file=sys.stderr)
        return 2
    results = cancel_run(run_id, home=home)
    left = {rank: r.get("left") for rank, r in results.items() if r.get("left")}
    if left:
        for rank, pids in left.items():
            print(f"node {rank}: processes still alive after SIGKILL: {pids}", file=sys.stderr)
        return 1
    print(f"run {run_id}: stopped on {len(results)} node(s)")
    return 0
