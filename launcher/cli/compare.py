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
    from launcher.paths import data_home
    from launcher.runs.core.store import RunStore
    from launcher.runs.read.comparison import compare_runs
    from launcher.runs.read.comparison_format import render

    home = data_home()
    store = RunStore(home)
    try:
        run_ids = [store.find(r) for r in args.runs]
    except LookupError as err:
        print(f"fsdp-tui compare: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(render(compare_runs(home, run_ids), args.format))
    return 0
