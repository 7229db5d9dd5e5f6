"""``fsdp-tui notify test [FILE]``: send a sample notification to every sink the user settings (and the
workload FILE, when given) configure, and say what happened to each."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("notify", help="notifications: send a sample to each configured sink",
                       description="Notifications are sent by each run's owner when the run ends (or stalls), "
                       "to the sinks of the workload's notify: and of the user settings (settings.json).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    t = actions.add_parser("test", help="send a sample summary to each configured sink")
    t.add_argument("file", metavar="FILE", type=Path, nargs="?", help="a workload whose notify: applies too")
    t.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.api import Client
    from launcher.api.records import NoSink, SettingsError

    workload_notify = None
    if args.file is not None:
        from launcher.workload.validate import validate_file

        result = validate_file(args.file, [])
        for problem in result.problems:
            if problem.is_error:
                print(problem.format(), file=sys.stderr)
        if result.workload is None:
            print(f"{args.file}: nothing sent: fix the errors above", file=sys.stderr)
            return 2
        workload_notify = result.workload.notify
    try:
        done = Client().records.send_sample_notification(workload_notify)
    except SettingsError as err:
        print(f"fsdp-tui notify: {err}", file=sys.stderr)
        return 1
    except NoSink as err:
        where = f"{args.file} (notify:) or {err}" if args.file else str(err)
        print(f"fsdp-tui notify: no sink configured: add webhooks, ntfy, email, desktop or command to the "
              f"notify of {where}", file=sys.stderr)
        return 2
    for d in done:
        tries = f" after {d.attempts} tries" if d.attempts > 1 else ""
        print(f"{d.sink}: {'sent' if d.ok else 'FAILED'}{tries}{'' if d.ok else ': ' + d.error}")
    return 0 if all(d.ok for d in done) else 1
