"""``fsdp-tui rm RUN...``: forget finished runs (their local records; nothing on the nodes)."""

from __future__ import annotations

import argparse
import sys

from launcher.cli import find_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rm", help="delete finished runs' local records")
    p.add_argument("run_ids", metavar="RUN", nargs="+", help="run ids or unique prefixes")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    code = 0
    for prefix in args.run_ids:
        found = find_run("rm", prefix)
        if found is None:
            code = 2
            continue
        store, run_id = found
        try:
            store.delete_run(run_id)
        except (LookupError, ValueError) as err:
            print(f"fsdp-tui rm: {err}", file=sys.stderr)
            code = 1
            continue
        print(f"deleted {run_id}")
    return code
