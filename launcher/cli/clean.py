"""``fsdp-tui clean RUN...``: remove finished runs' folders on every node and here (each node's run
directory: code, parameters, its log there, the outputs of a relative ``output_dir``), keeping their
records (logs, metrics and config stay here: ``fsdp-tui show`` and the app still open them)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, each_run

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("clean", help="remove finished runs' folders on every node and here; keep their records",
                       description="Remove each run's directory on every node (over SSH or SLURM's login node, as "
                       "the run reached it) and its folder on this machine: code snapshot, parameters, node log "
                       "there, and what a relative output_dir put under it (checkpoints, exports). The run's "
                       "record here stays. An absolute output_dir is outside the run's folders and stays.")
    add_run_argument(p, many=True)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return each_run("clean", args.run_ids, clean_one)


def clean_one(client: Client, run_id: str) -> int:
    """Remove one run's folders, saying what each node did; 1 when any node could not (or the run is live)."""
    import asyncio

    try:
        report = asyncio.run(client.run_files.clean(run_id))
    except ValueError as err:
        print(f"fsdp-tui clean: {err}", file=sys.stderr)
        return 1
    for line in report.lines():
        print(f"{run_id}: {line}", file=sys.stdout if not line.startswith("its output_dir") else sys.stderr)
    if not report.nodes:
        print(f"{run_id}: no folder of it was left on any node")
    return 0 if report.ok else 1
