"""``fsdp-tui export RUN [--step N] [--to DIR]``: one of the run's own checkpoints (never another run's that
shares its folder) as a Hugging Face folder, written on the node that holds it (where torch is, its bytes
checked against the trainer's digests first) and, with ``--to``, copied here."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, on_run

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a checkpoint to a Hugging Face folder (safetensors + tokenizer)")
    add_run_argument(p)
    p.add_argument("--step", type=int, help="the checkpoint of this step (default: the newest complete one)")
    p.add_argument("--to", type=Path, metavar="DIR", help="also copy the folder here (a new folder)")
    p.add_argument("--merged", action="store_true",
                   help="a LoRA checkpoint: also the base model with the adapter merged (DIR-merged with --to)")
    p.set_defaults(handler=run)


@on_run("export")
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    import asyncio

    from launcher.api.checkpoints import CheckpointError, NoOutputDir

    if args.to is not None and args.to.exists():
        print(f"fsdp-tui export: {args.to} exists: exports never overwrite, pick a new folder", file=sys.stderr)
        return 2
    try:
        listing = asyncio.run(client.checkpoints.list(run_id))
    except NoOutputDir as err:
        print(f"fsdp-tui export: {err}", file=sys.stderr)
        return 1
    if listing.error:
        print(f"fsdp-tui export: cannot reach the checkpoints of {run_id}: {listing.error}", file=sys.stderr)
        return 1
    chosen = listing.chosen(step=args.step)
    if chosen is None:
        print(f"fsdp-tui export: {listing.none_of_its_own('' if args.step is None else f'at step {args.step}')}",
              file=sys.stderr)
        return 1
    if args.merged and not chosen.adapter:
        print(f"fsdp-tui export: {chosen.name} is a full fine-tune's checkpoint: its export is the whole model "
              "already; leave out --merged", file=sys.stderr)
        return 1
    if args.merged and args.to is not None and Path(f"{args.to}-merged").exists():
        print(f"fsdp-tui export: {args.to}-merged exists: exports never overwrite, pick a new folder", file=sys.stderr)
        return 1
    what = "LoRA adapter" + (" and merged model" if args.merged else "") if chosen.adapter else "model"
    print(f"exporting {chosen.name} ({what}) on {listing.label} ...", file=sys.stderr)
    try:
        result = asyncio.run(client.checkpoints.export(run_id, chosen.name, args.to.resolve() if args.to else None,
                                                       merged=args.merged))
    except CheckpointError as err:
        print(f"fsdp-tui export: {err}", file=sys.stderr)
        return 1
    if result.reused:
        print(f"the trainer exported {chosen.name} itself at the run's end: that folder is the export (nothing "
              "written twice)", file=sys.stderr)
    print(f"{listing.label}: {result.path}" + ("  (LoRA adapter, PEFT format)" if chosen.adapter else ""))
    if result.merged:
        print(f"{listing.label}: {result.merged}  (merged model)")
    if result.local_copy:
        print(f"here: {result.local_copy}")
    if result.merged_copy:
        print(f"here: {result.merged_copy}")
    return 0
