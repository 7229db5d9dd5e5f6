"""``fsdp-tui mlflow sync RUN``: send a run's MLflow run what its owner could not (a tracking server that
was down or slow when the run ended). The next ``runs``, ``show``, ``logs`` or the app does it too, in the
background; this does it now and says how it went."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, on_run

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mlflow", help="MLflow tracking of runs: send what could not be sent")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sync = actions.add_parser("sync", help="send a run's records and end to its MLflow run now")
    add_run_argument(sync)
    p.set_defaults(handler=run)


@on_run("mlflow sync")
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    result = client.runs.send_tracking(run_id)
    print(f"run {run_id}: {result.words}", file=sys.stdout if result.done else sys.stderr)
    return 0 if result.done else 1
