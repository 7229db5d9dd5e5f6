"""``fsdp-tui cancel RUN``: stop every process of a run on every node, and say what really happened."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, on_run
from launcher.words import node_at, plural

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cancel", help="stop a run on all its nodes (SIGTERM, grace, SIGKILL, sweep)")
    add_run_argument(p)
    p.set_defaults(handler=run)


@on_run("cancel")
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    import asyncio

    report = asyncio.run(client.runs.cancel(run_id))
    if report.already_ended:
        why = f": {report.detail}" if report.detail else ""
        print(f"run {run_id} has already ended ({report.state.value}){why}; nothing to cancel", file=sys.stderr)
        return 1
    if report.timed_out:
        print(f"run {run_id}: still {report.state.value} after waiting; its owner is stopping it "
              f"(fsdp-tui show {run_id})", file=sys.stderr)
        return 1
    for line in report.leftovers:
        print(f"{line} (still alive after SIGKILL)", file=sys.stderr)
    for rank, host, state, detail in report.nodes:
        if state == "lost":
            print(f"{node_at(rank, host)}: {detail}", file=sys.stderr)
    for rank, host, state, detail in report.nodes:
        if state == "exited" and detail:
            print(f"{node_at(rank, host)}: {detail}", file=sys.stderr)
    print(f"run {run_id}: {report.state.value} on {plural(len(report.nodes), 'node')}")
    return 1 if report.leftovers else 0
