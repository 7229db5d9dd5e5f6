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
    add_fresh_option(p)
    p.add_argument("--cancel-on-interrupt", action="store_true",
                   help="Ctrl-C cancels the run (default: Ctrl-C detaches and the run goes on)")
    p.set_defaults(handler=run)


def add_fresh_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fresh", action="store_true",
                   help="start afresh: never continue a checkpoint another run left in a shared output_dir "
                        "(sets parameters.checkpoint.resume=never)")


def with_fresh(args: argparse.Namespace) -> list[str]:
    """The ``--set`` overrides, with ``--fresh``'s own when given."""
    from launcher.api.runs import FRESH

    return [*args.overrides, FRESH] if getattr(args, "fresh", False) else list(args.overrides)


def say_continues(outcome) -> None:
    """A run that continues another says so as it starts (the run, its step, its checkpoint)."""
    from launcher.api.runs import Launched

    if isinstance(outcome, Launched) and outcome.continues is not None:
        print(f"{outcome.run_id}: {outcome.continues.words()}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from launcher.api import Client

    plan = plan_or_say(args.file, with_fresh(args), Verbs("not launched", "cannot run"), quiet=False,
                       blockers=False, dry_run=args.dry_run)
    if plan is None:
        return USAGE_ERROR
    if plan.workload.sweep is not None:
        from launcher.workload.sweep import SWEEP_NOT_RUN

        print(SWEEP_NOT_RUN.format(file=args.file), file=sys.stderr)
    client = Client()
    if args.dry_run:
        from launcher.api.nodes import NodeError
        from launcher.present.dry_run import dry_run_text

        try:
            sys.stdout.write(dry_run_text(client.runs.dry_run(plan, ask_nodes=True)))
        except NodeError as err:
            print(f"{args.file}: cannot plan: {err}", file=sys.stderr)
            return USAGE_ERROR
        from launcher.present.plan_preview import estimate_lines, fit_lines

        print()
        print("\n".join(fit_lines(client.runs.fit(plan), str(args.file))))
        print("\n".join(estimate_lines(client.runs.estimate(plan), str(args.file))))
        return 0
    if plan.blockers:
        for blocker in plan.blockers:
            print(f"{args.file}: cannot run: {blocker}", file=sys.stderr)
        return USAGE_ERROR
    from launcher.api.runs import AlreadyLaunched, Refused
    from launcher.cli.watch import watch

    outcome = client.runs.launch(plan, force=args.force)
    if isinstance(outcome, Refused):
        refused(args.file, outcome, json_events=args.json)
        return USAGE_ERROR
    if isinstance(outcome, AlreadyLaunched):
        print(f"{args.file}: idempotency_token {outcome.token!r} was launched before as run "
              f"{outcome.run_id}: not launched again; following {outcome.run_id}", file=sys.stderr)
    say_continues(outcome)
    if args.detach:
        print(outcome.run_id)
        print(f"run {outcome.run_id} started; follow it: fsdp-tui logs {outcome.run_id} --follow", file=sys.stderr)
        return 0
    return watch(client, outcome.run_id, json_events=args.json, cancel_on_interrupt=args.cancel_on_interrupt,
                 num_nodes=len(plan.nodes))


def refused(source, refusal, *, json_events: bool = False) -> None:
    """Say (on stderr) why a launch of ``source`` was refused (:class:`~launcher.api.runs.Refused`): nothing of
    it was recorded. With ``json_events`` the cheap checks' reasons are also one ``LaunchRefused`` event on
    stdout."""
    import json

    if refusal.stage != "checks":
        for line in refusal.reasons:
            print(f"{source}: {line}" if refusal.stage == "output_dir" else f"{source}: cannot run: {line}",
                  file=sys.stderr)
        return
    for line in refusal.reasons:
        print(f"{source}: cannot run: {line}", file=sys.stderr)
    if json_events:
        print(json.dumps({"type": "LaunchRefused", "source": str(source), "reasons": list(refusal.reasons)}),
              flush=True)
    print(f"{source}: nothing was launched" + ("" if refusal.forced else
          " (--force launches past the cheap checks, not past a secret or a host key)"), file=sys.stderr)
