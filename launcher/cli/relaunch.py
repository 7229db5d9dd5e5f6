"""``fsdp-tui relaunch RUN [--set k=v] [--watch | --json]`` and ``fsdp-tui resume RUN [--from STEP]``:
a new run doing what RUN did (its recorded workload), from scratch or from its newest complete
checkpoint on the node that holds it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, number, on_run
from launcher.cli.run import add_fresh_option, say_continues, with_fresh
from launcher.cli.validate import add_set_option

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    for name, help_text in (("relaunch", "launch what a run ran again, as a new run"),
                            ("resume", "a new run of a run's workload, from its newest complete checkpoint")):
        p = sub.add_parser(name, help=help_text)
        add_run_argument(p)
        if name == "resume":
            p.add_argument("--from", dest="step", type=number, metavar="STEP",
                           help="the checkpoint of this step (default: the newest complete one of its own)")
        else:
            add_fresh_option(p)
        add_set_option(p)
        mode = p.add_mutually_exclusive_group()
        mode.add_argument("--watch", action="store_true", help="follow it: every node's lines and progress")
        mode.add_argument("--json", action="store_true", help="follow it as JSON events")
        mode.add_argument("--detach", action="store_true", help="start it and return at once")
        p.set_defaults(handler=run, verb=name)


@on_run()
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    import asyncio

    alive = client.runs.relaunch_hazard(run_id)
    if alive is not None:
        from launcher.present.relaunch import hazard_words

        print(f"fsdp-tui {args.verb}: {run_id}: {hazard_words(alive)}", file=sys.stderr)
        return 2  # as run: nothing was launched
    try:
        if args.verb == "resume":
            resumed = asyncio.run(client.runs.plan_resume(run_id, step=args.step, overrides=args.overrides))
            planned, bring = resumed.planned, resumed.bring
            copied = f" (copied there from run {run_id}'s {bring.root} first)" if bring else ""
            print(f"resuming from {resumed.path}{copied}", file=sys.stderr)
        else:
            planned = resumed = client.runs.plan_relaunch(run_id, with_fresh(args))
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
    from launcher.api.runs import Refused
    from launcher.cli.run import refused

    outcome = client.runs.launch(resumed, idempotent=False)
    if isinstance(outcome, Refused) and outcome.stage == "output_dir":
        print(f"fsdp-tui {args.verb}: {outcome.reasons[0]}", file=sys.stderr)
        return 2
    if isinstance(outcome, Refused):
        refused(f"fsdp-tui {args.verb} {run_id}", outcome, json_events=args.json)
        return 2  # as run: nothing was launched
    new_id = outcome.run_id
    say_continues(outcome)
    if not args.json:
        print(new_id)
    if args.detach or not (args.watch or args.json):
        print(f"run {new_id} started; follow it: fsdp-tui logs {new_id} --follow", file=sys.stderr)
        return 0
    from launcher.cli.watch import watch

    return watch(client, new_id, json_events=args.json, cancel_on_interrupt=False,
                 num_nodes=len(planned.plan.nodes))
