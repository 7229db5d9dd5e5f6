"""``fsdp-tui stacks RUN [--timeout S]``: every rank's stack on every node of a live run (py-spy where it
is installed on the node, else the built-in trainer's faulthandler into the node's log), kept with
the run. For a run that stopped making steps: which rank waits where."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, on_run

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stacks", help="every rank's stack on every node of a live run (a hung run)")
    add_run_argument(p)
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="how long to wait for the dumps")
    p.set_defaults(handler=run)


@on_run("stacks")
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    try:
        dumps = client.runs.stacks(run_id, timeout_s=args.timeout)
    except ValueError as err:
        print(f"fsdp-tui stacks: {err}", file=sys.stderr)
        return 1
    if not dumps.files:
        print(f"fsdp-tui stacks: no dump arrived within {args.timeout:.0f} s (fsdp-tui show {run_id})",
              file=sys.stderr)
        return 1
    for path in dumps.files:
        sys.stdout.write(path.read_text())
        print(f"(kept in {path})\n")
    return 0 if dumps.complete else 1
