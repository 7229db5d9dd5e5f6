"""``fsdp-tui relaunch RUN [--set k=v] [--watch | --json]`` and ``fsdp-tui resume RUN [--from STEP]``:
a new run doing what RUN did (its recorded workload), from scratch or from its newest complete
checkpoint on the node that holds it."""

from __future__ import annotations

import argparse
import sys

from launcher.cli import find_run
from launcher.cli.validate import add_set_option


def register(sub: argparse._SubParsersAction) -> None:
    for name, help_text in (("relaunch", "launch what a run ran again, as a new run"),
                            ("resume", "a new run of a run's workload, from its newest complete checkpoint")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
        if name == "resume":
            p.add_argument("--from", dest="step", type=int, metavar="STEP",
                           help="the checkpoint of this step (default: the newest complete one)")
        add_set_option(p)
        mode = p.add_mutually_exclusive_group()
        mode.add_argument("--watch", action="store_true", help="follow it: every node's lines and progress")
        mode.add_argument("--json", action="store_true", help="follow it as JSON events")
        mode.add_argument("--detach", action="store_true", help="start it and return at once")
        p.set_defaults(handler=run, verb=name)


def job_may_live(record) -> str:
    """Why a relaunch now would start a second SLURM job beside one that may still run (empty: it would
    not). A SLURM run that has not ended, or one whose login node was lost, may have its job running."""
    from launcher.events import NodeState
    from launcher.runs.core.layout import load_plan

    if record is None:
        return ""
    try:
        slurm = load_plan(record.directory).workload.compute.slurm
    except (OSError, ValueError):
        return ""  # no plan recorded (a run recorded before plans were kept): not a SLURM job of ours
    if slurm is None:
        return ""
    if not record.summary.state.is_final:
        return (f"its SLURM job may still be running (the run is {record.summary.state.value}); relaunching "
                f"would start a second job beside it: fsdp-tui cancel {record.summary.run_id} first")
    swept = _swept(record.directory)
    if any(n.state == NodeState.LOST and not swept.get(str(n.node_rank), {}).get("done") for n in record.nodes):
        return ("its login node was lost while the job ran, so the job may still be running; once the login "
                "answers, the next fsdp-tui command (fsdp-tui runs) stops it, then relaunch")
    return ""


def _swept(directory) -> dict:
    import json

    from launcher.runs.leftovers import SWEPT

    try:
        return json.loads((directory / SWEPT).read_text())
    except (OSError, ValueError):
        return {}


def run(args: argparse.Namespace) -> int:
    import asyncio

    from launcher.runs.launch import relaunch_plan, resume_plan, start_run

    found = find_run(args.verb, args.run_id)
    if found is None:
        return 2
    store, run_id = found
    alive = job_may_live(store.get_run(run_id))
    if alive:
        print(f"fsdp-tui {args.verb}: {run_id}: {alive}", file=sys.stderr)
        return 2  # as run: nothing was launched
    bring = None
    try:
        if args.verb == "resume":
            resumed = asyncio.run(resume_plan(store.home, run_id, args.step, args.overrides))
            planned, bring = resumed.planned, resumed.bring
            copied = f" (copied there from run {run_id}'s {bring['root']} first)" if bring else ""
            print(f"resuming from {resumed.path}{copied}", file=sys.stderr)
        else:
            planned = relaunch_plan(store.home, run_id, args.overrides)
    except LookupError as err:
        print(f"fsdp-tui {args.verb}: {err}", file=sys.stderr)
        return 2  # as run: nothing was launched
    for override in planned.result.overrides:
        print(f"--set {override.describe()}", file=sys.stderr)
    for problem in planned.problems:
        if problem.is_error:
            print(problem.format(), file=sys.stderr)
    if planned.plan is None:
        print(f"fsdp-tui {args.verb}: the recorded workload of {run_id} no longer validates (see above)",
              file=sys.stderr)
        return 2  # as run: nothing was launched
    from launcher.cli.run import refused
    from launcher.runs.launch import LaunchRefused

    if refused(f"fsdp-tui {args.verb} {run_id}", planned.plan, store.home, force=False,
               json_events=args.json):
        return 2  # as run: nothing was launched
    try:
        new_id = start_run(planned.plan, store.home, idempotent=False, resume_from=bring)
    except LaunchRefused as err:
        print(f"fsdp-tui {args.verb}: {err}", file=sys.stderr)
        return 2
    if not args.json:
        print(new_id)
    if args.detach or not (args.watch or args.json):
        print(f"run {new_id} started; follow it: fsdp-tui logs {new_id} --follow", file=sys.stderr)
        return 0
    from launcher.cli.watch import watch

    return watch(store.home, new_id, json_events=args.json, cancel_on_interrupt=False,
                 num_nodes=len(planned.plan.nodes))
