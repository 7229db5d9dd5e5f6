"""``fsdp-tui ckpt RUN [--all] [--verify] [--json]``: a run's checkpoints where their whole copies are: step,
complete or not (and why not), kind (``full``, or ``adapter``: a LoRA run's, the adapters only), size, age.
The run's own, and marked, the ones it continued (it resumed from them); with ``--all`` also the folder's
others, each with the run that wrote it. ``--verify`` first reads every whole one back where it lies and
checks it against the digests the trainer wrote (one that differs is marked, and listed not whole)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, on_run

if TYPE_CHECKING:
    from launcher.api import Client
    from launcher.api.checkpoints import CheckpointInfo, RunCheckpoints


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ckpt", help="list a run's checkpoints (on the node that holds them)")
    add_run_argument(p)
    p.add_argument("--all", action="store_true",
                   help="also the other runs' checkpoints in the same folder, each with the run that wrote it")
    p.add_argument("--verify", action="store_true",
                   help="first read every whole checkpoint back where it lies and check its bytes against the "
                        "digests the trainer wrote (reads them all)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


@on_run("ckpt")
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    import asyncio

    from launcher.api.checkpoints import CheckpointError, NoOutputDir

    differ = False
    if args.verify:
        try:
            checked = asyncio.run(client.checkpoints.verify(run_id))
        except NoOutputDir as err:
            print(str(err))
            return 0
        except CheckpointError as err:
            print(f"fsdp-tui ckpt: cannot check the checkpoints of {run_id}: {err}", file=sys.stderr)
            return 1
        for one in checked:
            print(one.words(), file=sys.stderr)
        differ = any(one.differs for one in checked)
    try:
        listing = asyncio.run(client.checkpoints.list(run_id))
    except NoOutputDir as err:
        if args.json:
            print("[]")
            return 0
        print(str(err))
        return 0
    if listing.error:
        print(f"fsdp-tui ckpt: cannot list the checkpoints of {run_id}: {listing.error}", file=sys.stderr)
        return 1
    shown = list(listing.listing.checkpoints if args.all else listing.checkpoints)
    if args.json:
        print(json.dumps([{**c.to_dict(), "whose": listing.whose(c)} for c in shown], indent=2))
        return 1 if differ else 0
    where = f"{listing.label}: {listing.root}"
    others = len(listing.others)
    if not shown:
        print(f"no checkpoints of run {run_id} in {where}" + ("" if listing.exists else
                                                              " (the folder does not exist yet)"))
        _say_others(listing, others, args.all)
        return 0
    print(where)
    _table(listing, shown)
    _say_others(listing, others, args.all)
    return 1 if differ else 0


def _table(listing: RunCheckpoints, shown: list[CheckpointInfo]) -> None:
    from launcher.present.checkpoints import completeness

    width = max(9, *(len(completeness(c)) + 1 for c in shown))  # "NO (node 1, 2)" fits
    print(f"{'STEP':>8}  {'COMPLETE':<{width}} {'KIND':<8} {'SIZE':>9}  {'AGE':>8}  NAME")
    for c in shown:
        age = time.time() - c.mtime
        age_text = f"{age / 3600:.1f}h" if age > 3600 else f"{age / 60:.0f}m"
        whose = "" if listing.whose(c) == "own" else f"  ({listing.whose_words(c)})"
        print(f"{c.step:>8}  {completeness(c):<{width}} {c.kind:<8} {c.size_bytes / 2**20:>7.1f}M  {age_text:>8}  "
              f"{c.name}{whose}")
    for c in shown:
        if not c.complete and c.why:
            print(f"  {c.name}: not whole: {c.why}")


def _say_others(listing: RunCheckpoints, others: int, shown: bool) -> None:
    if others and not shown:
        what = "checkpoint" if others == 1 else "checkpoints"
        print(f"(the folder also holds {others} {what} of other runs: fsdp-tui ckpt {listing.run_id} --all)",
              file=sys.stderr)
