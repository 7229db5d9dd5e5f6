"""``fsdp-tui mlflow sync RUN``: send a run's MLflow run what its owner could not (a tracking server that
was down or slow when the run ended). The next ``runs``, ``show``, ``logs`` or the app does it too, in the
background; this does it now and says how it went."""

from __future__ import annotations

import argparse
import sys

from launcher.cli import find_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mlflow", help="MLflow tracking of runs: send what could not be sent")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sync = actions.add_parser("sync", help="send a run's records and end to its MLflow run now")
    sync.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    found = find_run("mlflow sync", args.run_id)
    if found is None:
        return 2
    store, run_id = found
    from launcher.paths import private_files
    from launcher.runs.launch import send_tracking

    private_files()  # a store this creates is the user's alone, as the owner's are
    result = send_tracking(store.home, run_id)
    print(f"run {run_id}: {result.words}", file=sys.stdout if result.done else sys.stderr)
    return 0 if result.done else 1
