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
    from launcher.notify.deliver import deliver
    from launcher.notify.summary import CheckpointFact, RunFacts, build_summary
    from launcher.paths import data_home
    from launcher.runs.core.user_settings import (
        SettingsError,
        effective_notify,
        load_user_settings,
        settings_file,
    )
    from launcher.secrets import SecretStore

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
        notify = effective_notify(workload_notify, load_user_settings())
    except SettingsError as err:
        print(f"fsdp-tui notify: {err}", file=sys.stderr)
        return 1
    if notify is None:
        where = f"{args.file} (notify:) or {settings_file()}" if args.file else str(settings_file())
        print(f"fsdp-tui notify: no sink configured: add webhooks, ntfy, email, desktop or command to the "
              f"notify of {where}", file=sys.stderr)
        return 2
    facts = RunFacts(run_id="20260101-000000-sample-0000", experiment="sample", event="test",
                     detail="a sample sent by fsdp-tui notify test", duration_s=3723.0, step=120, max_steps=1000,
                     last_loss=1.2345, best_eval_loss=1.3012, usage={"kind": "gpu", "hours": 16.5, "cost": None},
                     checkpoint=CheckpointFact("step-00000100", 100, 300.0),
                     triage={"node_rank": 1, "rank": 9, "exit_code": 1, "signature": "oom", "line_no": 4242,
                             "excerpt": "torch.OutOfMemoryError: CUDA out of memory (a sample)"})
    done = deliver(notify, build_summary(facts), SecretStore(data_home()))
    for d in done:
        tries = f" after {d.attempts} tries" if d.attempts > 1 else ""
        print(f"{d.sink}: {'sent' if d.ok else 'FAILED'}{tries}{'' if d.ok else ': ' + d.error}")
    return 0 if all(d.ok for d in done) else 1
