"""``fsdp-tui compare RUN RUN... [--format table|csv|md|json]``: any runs side by side."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="runs side by side: throughput, memory, losses (table, CSV, Markdown, JSON)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run ids (or their tails)")
    p.add_argument("--format", choices=("table", "csv", "md", "json"), default="table")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.api import Client
    from launcher.api.runs import RunNotFound
    from launcher.present.comparison import render

    runs = Client().runs
    try:
        run_ids = [runs.find(r) for r in args.runs]
    except RunNotFound as err:
        print(f"fsdp-tui compare: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(render(runs.compare(run_ids), args.format))
    return 0
