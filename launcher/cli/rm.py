"""``fsdp-tui rm [--files] RUN...``: forget finished runs (their local records). Without ``--files`` a run's
files stay where they are, and ``rm`` says where, with a command that removes each (the run's record,
which ``fsdp-tui clean`` needs to reach its nodes, is gone then). ``--files`` first removes the run's
folders on every node and here (``fsdp-tui clean``), and forgets the run only once they are gone."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from launcher.cli import find_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rm", help="forget finished runs (--files: remove their folders on every node first)")
    p.add_argument("run_ids", metavar="RUN", nargs="+", help="run ids or unique prefixes")
    p.add_argument("--files", action="store_true",
                   help="first remove each run's folders on every node and here (checkpoints, exports, outputs "
                        "under them), as fsdp-tui clean does")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    code = 0
    for prefix in args.run_ids:
        found = find_run("rm", prefix)
        if found is None:
            code = max(code, 2)
            continue
        store, run_id = found
        if args.files:
            from launcher.cli.clean import clean_one

            if clean_one(store.home, run_id) != 0:
                print(f"fsdp-tui rm: {run_id} is kept: some of its files could not be removed (above); "
                      f"fsdp-tui rm --files {run_id} tries again, fsdp-tui rm {run_id} forgets it as it is",
                      file=sys.stderr)
                code = 1
                continue
        stays = [] if args.files else what_stays(store, run_id)
        try:
            store.delete_run(run_id)
        except (LookupError, ValueError) as err:
            print(f"fsdp-tui rm: {err}", file=sys.stderr)
            code = 1
            continue
        print(f"deleted {run_id}")
        for line in stays:
            print(line, file=sys.stderr)
    return code


def what_stays(store, run_id: str) -> list[str]:
    """Where the run's files stay once its record is gone, each with the command that removes it."""
    from launcher.runs.cleanup import cleaned
    from launcher.runs.core.space import fmt_bytes
    from launcher.workload.load import LOCAL_NODES_DIR

    record = store.get_run(run_id)
    if record is None or cleaned(record.directory) is not None:
        return []
    out = []
    here = Path(store.home) / LOCAL_NODES_DIR / run_id
    if here.is_dir():
        size = fmt_bytes(folder_bytes(here))
        out.append(f"its files here stay: {here} ({size}: checkpoints, exports, outputs); remove them: "
                   f"rm -r {shlex.quote(str(here))}")
    for node in record.nodes:
        if not node.node_dir.startswith(str(store.home)):
            out.append(f"its files on node {node.node_rank} ({node.host}) stay there: {node.node_dir}")
    if out:
        out.append(f"(fsdp-tui clean {run_id}, or rm --files, removes a run's folders on every node; run it "
                   "before rm, while the record still knows the nodes)")
    return out


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (links are not followed: they hold no space of the run's)."""
    import os

    total = 0
    for root, _dirs, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total
