"""``fsdp-tui rm [--files] RUN...``: forget finished runs (their local records). Without ``--files`` a run's
files stay where they are, and ``rm`` says where before it forgets the run, with a command for each that
needs no record (the user's own ``rm``, or ``ssh`` to the node as the launch reached it); in a terminal it
asks first. ``--files`` first removes the run's folders on every node and here, and its own checkpoints in
a fixed ``output_dir`` (``fsdp-tui clean``), and forgets the run only once they are gone."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, each_run

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rm", help="forget finished runs (--files: remove their folders on every node first)")
    add_run_argument(p, many=True)
    p.add_argument("--files", action="store_true",
                   help="first remove each run's folders on every node and here (checkpoints, exports, outputs "
                        "under them), as fsdp-tui clean does")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return each_run("rm", args.run_ids, lambda client, run_id: forget(client, run_id, files=args.files))


def forget(client: Client, run_id: str, *, files: bool) -> int:
    """Forget one run (with ``files``: once its folders are gone from every node); 1 when it is kept."""
    if files:
        from launcher.cli.clean import clean_one

        if clean_one(client, run_id) != 0:
            print(f"fsdp-tui rm: {run_id} is kept: some of its files could not be removed (above); "
                  f"fsdp-tui rm --files {run_id} tries again, fsdp-tui rm {run_id} forgets it as it is",
                  file=sys.stderr)
            return 1
    stays = [] if files else client.run_files.left_behind(run_id)
    if stays:
        from launcher.present.run_files import left_behind_line

        for left in stays:  # said while the record still knows where: each line's command needs no record
            print(left_behind_line(left), file=sys.stderr)
    if stays and sys.stdin.isatty() and not _agreed(run_id):
        print(f"fsdp-tui rm: {run_id} is kept; fsdp-tui rm --files {run_id} removes its files first", file=sys.stderr)
        return 1
    try:
        client.runs.delete(run_id)
    except (LookupError, ValueError) as err:
        print(f"fsdp-tui rm: {err}", file=sys.stderr)
        return 1
    print(f"deleted {run_id}")
    return 0


def _agreed(run_id: str) -> bool:
    try:
        answer = input(f"forget {run_id} and leave these files where they are? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")
