"""``fsdp-tui repair [--force]``: a damaged run store moved aside and rebuilt from the run folders."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("repair", help="rebuild the run store (runs.db) from the run folders when it is damaged")
    p.add_argument("--force", action="store_true", help="rebuild it even when it reads as sound")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.api import Client

    records = Client().records
    problem = records.store_problem()
    if problem is None and not args.force:
        if records.store_file.exists():
            print(f"{records.store_file} is sound: nothing to repair (--force rebuilds it anyway)")
            return 0
    if problem is not None:
        print(f"{records.store_file} is damaged: {problem}")
    owners = records.live_owners()
    if owners:
        named = ", ".join(f"{run_id} (pid {pid})" for run_id, pid in owners)
        print(f"fsdp-tui repair: not now: the owners of {named} are still writing to the store; let them end "
              f"(or stop them: kill PID; their runs are caught up when adopted), then run repair again",
              file=sys.stderr)
        return 1
    report = records.rebuild_store()
    for line in report.lines():
        print(line)
    return 0
