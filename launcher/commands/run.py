"""``fsdp-tui run FILE [--set k=v] [--dry-run | --watch | --json]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from launcher.commands.validate import add_set_option


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="launch a workload (in a terminal: opens the run monitor)",
                       description="Launch a workload on its nodes. In a terminal this opens the run "
                       "monitor; --watch and --json stream headless; --dry-run only prints the plan.")
    p.add_argument("file", metavar="FILE", type=Path)
    add_set_option(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print each node's host, rank, directory, environment and command; touch nothing")
    mode.add_argument("--watch", action="store_true", help="stream every node's log lines and progress")
    mode.add_argument("--json", action="store_true", help="stream run events as JSON lines")
    p.set_defaults(handler=run)


def prepare(file: Path, overrides: list[str], *, quiet: bool = False):
    """Validate and plan; prints problems to stderr. ``None`` when the workload has errors."""
    from launcher.plan import build_plan
    from launcher.validate import validate_file

    result = validate_file(file, overrides)
    for o in result.overrides:
        print(f"--set {o.describe()}", file=sys.stderr)
    for p in result.problems:
        if p.is_error or not quiet:
            print(p.format(), file=sys.stderr)
    if result.workload is None:
        print(f"{file}: not launched: fix the errors above (fsdp-tui validate {file})", file=sys.stderr)
        return None
    from launcher.paths import data_home, new_run_id
    from launcher.plan import local_node_root

    run_id = new_run_id(result.workload.experiment_name)
    return build_plan(result.workload, run_id=run_id, source_file=file.resolve(),
                      node_root=local_node_root(result.workload, data_home()))


def run(args: argparse.Namespace) -> int:
    plan = prepare(args.file, args.overrides)
    if plan is None:
        return 1
    if args.dry_run:
        from launcher.plan import render_plan

        sys.stdout.write(render_plan(plan))
        return 0
    if plan.blockers:
        for blocker in plan.blockers:
            print(f"{args.file}: cannot run: {blocker}", file=sys.stderr)
        return 1
    import asyncio

    from launcher.headless import run_headless
    from launcher.paths import data_home

    return asyncio.run(run_headless(plan, watch=args.watch or not args.json, json_events=args.json,
                                    home=data_home()))
