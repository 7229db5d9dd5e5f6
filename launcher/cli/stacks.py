"""``fsdp-tui stacks RUN [--timeout S]``: every rank's stack on every node of a live run (py-spy where it
is installed on the node, else the built-in trainer's faulthandler into the node's log), kept with
the run. For a run that stopped making steps: which rank waits where."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from launcher.cli import find_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stacks", help="every rank's stack on every node of a live run (a hung run)")
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="how long to wait for the dumps")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.runs.core.ownership import request_stacks
    from launcher.runs.launch import adopt_orphans_of

    found = find_run("stacks", args.run_id)
    if found is None:
        return 2
    store, run_id = found
    record = store.get_run(run_id)
    if record.summary.state.is_final:
        print(f"fsdp-tui stacks: run {run_id} has ended ({record.summary.state.value}): no process to look at",
              file=sys.stderr)
        return 1
    folder = record.directory / "stacks"
    before = set(folder.glob("*.txt")) if folder.exists() else set()
    request_stacks(store.home, run_id)
    adopt_orphans_of(store.home)  # the owner answers; a run without one gets one
    deadline = time.monotonic() + args.timeout
    wanted = len(record.nodes)
    new: list[Path] = []
    while time.monotonic() < deadline:
        new = sorted(set(folder.glob("*.txt")) - before) if folder.exists() else []
        if len(new) >= wanted:
            break
        time.sleep(0.2)
    if not new:
        print(f"fsdp-tui stacks: no dump arrived within {args.timeout:.0f} s (fsdp-tui show {run_id})",
              file=sys.stderr)
        return 1
    for path in new:
        sys.stdout.write(path.read_text())
        print(f"(kept in {path})\n")
    return 0 if len(new) >= wanted else 1
