"""``fsdp-tui ckpt RUN [--json]``: a run's checkpoints: step, complete or not, size, age."""

from __future__ import annotations

import argparse
import json
import time

from launcher.commands import find_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ckpt", help="list a run's checkpoints")
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.checkpoints import checkpoints_of_run

    found = find_run("ckpt", args.run_id)
    if found is None:
        return 2
    store, run_id = found
    root, ckpts = checkpoints_of_run(store.get_run(run_id))
    if args.json:
        print(json.dumps([c.to_dict() for c in ckpts], indent=2))
        return 0
    if root is None:
        print(f"run {run_id} has no parameters.output_dir: its script keeps its own checkpoints")
        return 0
    if not ckpts:
        print(f"no checkpoints in {root}")
        return 0
    print(f"{root}")
    print(f"{'STEP':>8}  {'COMPLETE':<9} {'SIZE':>9}  {'AGE':>8}  PATH")
    for c in ckpts:
        age = time.time() - c.mtime
        age_text = f"{age / 3600:.1f}h" if age > 3600 else f"{age / 60:.0f}m"
        print(f"{c.step:>8}  {'yes' if c.complete else 'NO':<9} {c.size_bytes / 2**20:>7.1f}M  {age_text:>8}  {c.path}")
    return 0
