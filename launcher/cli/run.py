"""``fsdp-tui run FILE [--set k=v] [--dry-run | --watch | --json | --detach] [--cancel-on-interrupt]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from launcher.cli.planning import USAGE_ERROR, Verbs, plan_or_say
from launcher.cli.validate import add_set_option


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="launch a workload (in a terminal: opens the run monitor)",
                       description="Launch a workload on its nodes. The run is owned by a supervisor process "
                       "of its own: it outlives this command and its terminal. In a terminal this opens the run "
                       "monitor; --watch and --json follow it headless (Ctrl-C detaches, the run goes on); "
                       "--dry-run only prints the plan.")
    p.add_argument("file", metavar="FILE", type=Path)
    add_set_option(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print each node's host, rank, directory, environment and command; touch nothing")
    mode.add_argument("--watch", action="store_true", help="stream every node's log lines and progress")
    mode.add_argument("--json", action="store_true", help="stream run events as JSON lines")
    mode.add_argument("--detach", action="store_true", help="start it, print its id and return at once")
    p.add_argument("--force", action="store_true",
                   help="launch even when the cheap checks say it cannot run there (see fsdp-tui doctor)")
    p.add_argument("--cancel-on-interrupt", action="store_true",
                   help="Ctrl-C cancels the run (default: Ctrl-C detaches and the run goes on)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    plan = plan_or_say(args.file, args.overrides, Verbs("not launched", "cannot run"), quiet=False, blockers=False,
                       dry_run=args.dry_run)
    if plan is None:
        return USAGE_ERROR
    if plan.workload.sweep is not None:
        from launcher.workload.sweep import SWEEP_NOT_RUN

        print(SWEEP_NOT_RUN.format(file=args.file), file=sys.stderr)
    if args.dry_run:
        from launcher.backends.base import NodeError
        from launcher.paths import data_home
        from launcher.runs.core.estimates import estimate_lines
        from launcher.runs.launch import render_plan_text

        try:
            sys.stdout.write(render_plan_text(plan, ask_nodes=True))
        except NodeError as err:
            print(f"{args.file}: cannot plan: {err}", file=sys.stderr)
            return USAGE_ERROR
        print()
        print("\n".join(estimate_lines(data_home(), plan, str(args.file))))
        return 0
    if plan.blockers:
        for blocker in plan.blockers:
            print(f"{args.file}: cannot run: {blocker}", file=sys.stderr)
        return USAGE_ERROR
    from launcher.cli.watch import watch
    from launcher.paths import data_home
    from launcher.runs.launch import LaunchRefused, start_run

    home = data_home()
    if refused(args.file, plan, home, force=args.force, json_events=args.json):
        return USAGE_ERROR
    try:
        run_id = start_run(plan, home, force=args.force)
    except LaunchRefused as err:
        print(f"{args.file}: {err}", file=sys.stderr)
        return USAGE_ERROR
    if run_id != plan.run_id:
        print(f"{args.file}: idempotency_token {plan.workload.idempotency_token!r} was launched before as run "
              f"{run_id}: not launched again; following {run_id}", file=sys.stderr)
    if args.detach:
        print(run_id)
        print(f"run {run_id} started; follow it: fsdp-tui logs {run_id} --follow", file=sys.stderr)
        return 0
    return watch(home, run_id, json_events=args.json, cancel_on_interrupt=args.cancel_on_interrupt,
                 num_nodes=len(plan.nodes))


def refused(source, plan, home, *, force: bool, json_events: bool = False) -> bool:
    """Say (on stderr) why ``plan`` cannot start, before anything of it is recorded: a missing secret, an
    unknown host key, and (unless ``force``) what the cheap checks refuse. ``True``: nothing was launched.
    With ``json_events`` the reasons are also one ``LaunchRefused`` event on stdout."""
    import asyncio
    import json

    from launcher.runs.launch import check_room, launch_refusals

    check_room(home)  # a data dir with no room says so first: the launch would stop there anyway
    said = asyncio.run(launch_refusals(plan, home, force=force))
    for line in said:
        print(f"{source}: cannot run: {line}", file=sys.stderr)
    if said and json_events:
        print(json.dumps({"type": "LaunchRefused", "source": str(source), "reasons": list(said)}), flush=True)
    if said:
        print(f"{source}: nothing was launched" + ("" if force else
              " (--force launches past the cheap checks, not past a secret or a host key)"), file=sys.stderr)
    return bool(said)
