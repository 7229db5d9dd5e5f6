"""``fsdp-tui ckpt RUN [--json]``: a run's checkpoints where their whole copies are: step, complete or not, kind
(``full``, or ``adapter``: a LoRA run's, the adapters only), size, age."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, on_run

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ckpt", help="list a run's checkpoints (on the node that holds them)")
    add_run_argument(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


@on_run("ckpt")
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    import asyncio

    from launcher.api.checkpoints import NoOutputDir, completeness

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
    if args.json:
        print(json.dumps([c.to_dict() for c in listing.checkpoints], indent=2))
        return 0
    where = f"{listing.label}: {listing.root}"
    if not listing.checkpoints:
        print(f"no checkpoints in {where}" + ("" if listing.exists else " (the folder does not exist yet)"))
        return 0
    print(where)
    width = max(9, *(len(completeness(c)) + 1 for c in listing.checkpoints))  # "NO (node 1, 2)" fits
    print(f"{'STEP':>8}  {'COMPLETE':<{width}} {'KIND':<8} {'SIZE':>9}  {'AGE':>8}  NAME")
    for c in listing.checkpoints:
        age = time.time() - c.mtime
        age_text = f"{age / 3600:.1f}h" if age > 3600 else f"{age / 60:.0f}m"
        print(f"{c.step:>8}  {completeness(c):<{width}} {c.kind:<8} {c.size_bytes / 2**20:>7.1f}M  {age_text:>8}  "
              f"{c.name}")
    return 0
