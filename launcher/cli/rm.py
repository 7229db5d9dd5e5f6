"""``fsdp-tui rm [--files] RUN...``: forget finished runs (their local records). A run on this machine also
has a run folder in the data dir (``nodes/<run>/``: checkpoints, exports, outputs), often far bigger than
its record: ``rm`` says so with its size, and ``--files`` removes it too. Nothing on other nodes is touched."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from launcher.cli import find_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rm", help="delete finished runs' local records (--files: and their files here)")
    p.add_argument("run_ids", metavar="RUN", nargs="+", help="run ids or unique prefixes")
    p.add_argument("--files", action="store_true",
                   help="also remove the run's folder on this machine (checkpoints, exports, outputs)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.workload.load import LOCAL_NODES_DIR

    code = 0
    for prefix in args.run_ids:
        found = find_run("rm", prefix)
        if found is None:
            code = 2
            continue
        store, run_id = found
        record = store.get_run(run_id)
        remote = [n for n in record.nodes if not n.node_dir.startswith(str(store.home))] if record else []
        try:
            store.delete_run(run_id)
        except (LookupError, ValueError) as err:
            print(f"fsdp-tui rm: {err}", file=sys.stderr)
            code = 1
            continue
        print(f"deleted {run_id}")
        files = Path(store.home) / LOCAL_NODES_DIR / run_id
        if files.is_dir():
            size = human_size(folder_bytes(files))
            if args.files:
                shutil.rmtree(files, ignore_errors=True)
                print(f"removed its files here: {files} ({size})")
            else:
                print(f"its files here stay: {files} ({size}: checkpoints, exports, outputs); "
                      f"fsdp-tui rm --files {run_id} removes them", file=sys.stderr)
        for node in remote:
            print(f"its files on node {node.node_rank} ({node.host}) stay there: {node.node_dir}", file=sys.stderr)
    return code


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (links are not followed: they hold no space of the run's)."""
    total = 0
    for root, _dirs, names in os.walk(folder):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_size
    return total


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
