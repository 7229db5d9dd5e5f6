"""``fsdp-tui logs RUN [--node N | --rank R] [--follow] [--tail N]``: a run's node logs from the local record,
made safe to show (the record keeps the node's bytes; the terminal gets no control sequence from a job).
``--rank``: one rank's own output, asked of the node that ran it (:mod:`launcher.runs.read.rank_log`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, keep_colour, number, on_run

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logs", help="print a run's node logs")
    add_run_argument(p)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--node", type=number, help="only this node (default: all, prefixed by node)")
    where.add_argument("--rank", type=number, metavar="R",
                       help="only what global rank R wrote, read from its node (jobs under torchrun: the built-in "
                            "trainer, or a command that runs torchrun)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing while the run is active")
    p.add_argument("--tail", type=_count, metavar="N", help="start with the last N lines (0: none)")
    p.set_defaults(handler=run)


@on_run("logs")
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    from launcher.api.run_files import LineSplitter

    client.runs.adopt()
    if args.rank is not None:
        return _rank(client, run_id, args)
    record = client.runs.record(run_id)
    ranks = [n.node_rank for n in record.nodes]
    if args.node is not None:
        if args.node not in ranks:
            print(f"fsdp-tui logs: run {run_id} has nodes {ranks}", file=sys.stderr)
            return 2
        ranks = [args.node]
    prefix = len(record.nodes) > 1 and args.node is None
    colour = keep_colour()
    splitters = {rank: LineSplitter(colour) for rank in ranks}
    offsets = {}
    for rank in ranks:
        path = client.run_files.node_log(run_id, rank)
        offsets[rank] = _print_from(path, splitters[rank], rank if prefix else None, args.tail, args.follow)
    while args.follow:
        active = not client.runs.record(run_id).summary.state.is_final
        for rank in ranks:
            path = client.run_files.node_log(run_id, rank)
            with open(path, "rb") if path.exists() else open("/dev/null", "rb") as f:
                f.seek(offsets[rank])
                chunk = f.read()
            offsets[rank] += len(chunk)
            lines = splitters[rank].feed(chunk) + (splitters[rank].flush() if not active else [])
            _write(lines, rank if prefix else None)
        if not active:
            break
        time.sleep(0.3)
    return 0


READ_CHUNK = 1 << 20


def _print_from(path, splitter, rank: int | None, tail: int | None, follow: bool) -> int:
    """Print the log (its last ``tail`` lines: found from the end, never reading the rest) a chunk at a
    time, so a log of any size costs the lines shown; returns the offset its end was read to."""
    from launcher.api.run_files import tail_offset

    try:
        with open(path, "rb") as f:
            offset = 0 if tail is None else tail_offset(f, tail, complete_only=follow)
            f.seek(offset)
            while chunk := f.read(READ_CHUNK):
                offset += len(chunk)
                _write(splitter.feed(chunk), rank)
    except FileNotFoundError:
        return 0
    if not follow:
        _write(splitter.flush(), rank)
    return offset


def _count(text: str) -> int:
    """``--tail``'s count, by the one ASCII-number rule of the commands (:func:`launcher.cli.number`)."""
    from launcher.cli import shown_word
    from launcher.words import ascii_number

    value = ascii_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"--tail takes a count of lines in digits 0-9, 0 or more (got "
                                         f"{shown_word(text)})")
    return value


def _write(lines: list[str], rank: int | None) -> None:
    prefix = f"[node {rank}] " if rank is not None else ""
    sys.stdout.write("".join(f"{prefix}{line}\n" for line in lines))
    sys.stdout.flush()


NOTHING_OF_ITS_OWN = ("each rank's lines are kept apart when the job runs under torchrun, and the built-in "
                      "trainer prints from rank 0 (the others print only their warnings and errors)")


def _rank(client: Client, run_id: str, args: argparse.Namespace) -> int:
    """One rank's own lines, from the node that ran it; with ``--follow``, until the run ends."""
    import asyncio
    from collections import deque

    from launcher.api.run_files import LineSplitter, RankLogError

    try:
        log = client.run_files.rank_log(run_id, args.rank)
    except RankLogError as err:
        print(f"fsdp-tui logs: {err}", file=sys.stderr)
        return 2

    async def follow() -> int:
        splitter, first, shown = LineSplitter(keep_colour()), True, 0
        try:
            while True:
                final = client.runs.record(run_id).summary.state.is_final
                # Printed chunk by chunk as it comes: a log of any size passes through, one chunk held. The
                # first read's --tail keeps only its last N lines, as they pass.
                tail: deque[str] | None = deque(maxlen=args.tail) if first and args.tail is not None else None
                async for chunk in log.chunks():
                    lines = splitter.feed(chunk)
                    if tail is not None:
                        tail.extend(lines)
                    else:
                        shown += len(lines)
                        _write(lines, None)
                lines = splitter.flush() if final or not args.follow else []
                if tail is not None:
                    tail.extend(lines)
                    lines = list(tail)
                first, shown = False, shown + len(lines)
                _write(lines, None)
                if final or not args.follow:
                    break
                await asyncio.sleep(0.5)
        except RankLogError as err:
            print(f"fsdp-tui logs: {err}", file=sys.stderr)
            return 1
        finally:
            await log.close()
        if not shown and args.tail != 0:
            print(f"fsdp-tui logs: {log.label} wrote nothing of its own (yet): {NOTHING_OF_ITS_OWN}", file=sys.stderr)
        return 0

    return asyncio.run(follow())
