"""``fsdp-tui logs RUN [--node N] [--rank R] [--follow] [--tail N]``: a run's node logs from the local record,
made safe to show (the record keeps the node's bytes; the terminal gets no control sequence from a job).
``--rank``: only the lines that rank wrote (torchrun tags each line with its rank; ``launcher.workload.plan``)."""

from __future__ import annotations

import argparse
import sys
import time

from launcher.cli import find_run, keep_colour


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logs", help="print a run's node logs")
    p.add_argument("run_id", metavar="RUN", help="run id or a unique prefix of it")
    p.add_argument("--node", type=int, help="only this node (default: all, prefixed by node)")
    p.add_argument("--rank", type=int, metavar="R",
                   help="only the lines global rank R wrote (runs under torchrun: the built-in trainer, or a command "
                        "that runs torchrun)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing while the run is active")
    p.add_argument("--tail", type=_count, metavar="N", help="start with the last N lines (0: none)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    found = find_run("logs", args.run_id)
    if found is None:
        return 2
    store, run_id = found
    from launcher.runs.core.streams import LineSplitter
    from launcher.runs.launch import adopt_orphans_of

    adopt_orphans_of(store.home)
    record = store.get_run(run_id)
    ranks = [n.node_rank for n in record.nodes]
    if args.node is not None:
        if args.node not in ranks:
            print(f"fsdp-tui logs: run {run_id} has nodes {ranks}", file=sys.stderr)
            return 2
        ranks = [args.node]
    if args.rank is not None and not 0 <= args.rank < _world(record):
        print(f"fsdp-tui logs: run {run_id} has ranks 0-{_world(record) - 1}", file=sys.stderr)
        return 2
    prefix = len(record.nodes) > 1 and args.node is None and args.rank is None
    colour = keep_colour()
    shown = 0
    splitters = {rank: LineSplitter(colour) for rank in ranks}
    offsets = {}
    for rank in ranks:
        path = record.directory / "nodes" / f"{rank}.log"
        data = path.read_bytes() if path.exists() else b""
        offsets[rank] = len(data)
        lines = _of_rank(splitters[rank], data, not args.follow, args.rank)
        shown += len(lines)
        if args.tail is not None:
            lines = lines[max(0, len(lines) - args.tail):]
        _write(lines, rank if prefix else None)
    while args.follow:
        active = not store.get_run(run_id).summary.state.is_final
        for rank in ranks:
            path = record.directory / "nodes" / f"{rank}.log"
            with open(path, "rb") if path.exists() else open("/dev/null", "rb") as f:
                f.seek(offsets[rank])
                chunk = f.read()
            offsets[rank] += len(chunk)
            lines = _of_rank(splitters[rank], chunk, not active, args.rank)
            shown += len(lines)
            _write(lines, rank if prefix else None)
        if not active:
            break
        time.sleep(0.3)
    if args.rank is not None and not shown:
        print(f"fsdp-tui logs: no line of run {run_id} says it is from rank {args.rank} (yet): ranks are told "
              "apart in runs under torchrun (the built-in trainer, or a command that runs torchrun)", file=sys.stderr)
    return 0


def _of_rank(splitter, data: bytes, final: bool, rank: int | None) -> list[str]:
    """The lines of ``data`` (and, ``final``, the partial last one), only those of ``rank`` when given."""
    lines, ranks = splitter.feed(data), list(splitter.ranks)
    if final:
        lines += splitter.flush()
        ranks += splitter.ranks
    if rank is None:
        return lines
    return [line for line, r in zip(lines, ranks, strict=True) if r == rank]


def _world(record) -> int:
    from launcher.runs.core.layout import load_plan

    try:
        return load_plan(record.directory).topology.world_size
    except (OSError, ValueError, KeyError):
        return len(record.nodes)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tail takes a count of lines, 0 or more (got {text!r})") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"--tail takes a count of lines, 0 or more (got {value})")
    return value


def _write(lines: list[str], rank: int | None) -> None:
    prefix = f"[node {rank}] " if rank is not None else ""
    sys.stdout.write("".join(f"{prefix}{line}\n" for line in lines))
    sys.stdout.flush()
