"""``fsdp-tui repair [--force]``: a damaged run store moved aside and rebuilt from the run folders."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("repair", help="rebuild the run store (runs.db) from the run folders when it is damaged")
    p.add_argument("--force", action="store_true", help="rebuild it even when it reads as sound")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.paths import data_home
    from launcher.runs.core.ownership import live_owners
    from launcher.runs.core.rebuild import check_store, rebuild_store

    home = data_home()
    problem = check_store(home)
    if problem is None and not args.force:
        if (home / "runs.db").exists():
            print(f"{home / 'runs.db'} is sound: nothing to repair (--force rebuilds it anyway)")
            return 0
    if problem is not None:
        print(f"{home / 'runs.db'} is damaged: {problem}")
    owners = live_owners(home)
    if owners:
        named = ", ".join(f"{run_id} (pid {pid})" for run_id, pid in owners)
        print(f"fsdp-tui repair: not now: the owners of {named} are still writing to the store; let them end "
              f"(or stop them: kill PID; their runs are caught up when adopted), then run repair again",
              file=sys.stderr)
        return 1
    report = rebuild_store(home)
    for line in report.lines():
        print(line)
    return 0
