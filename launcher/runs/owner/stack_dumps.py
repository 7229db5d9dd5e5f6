"""Every rank's stack on every reachable node, taken at once and kept with the run; with torch's flight
recorder, what each rank's last collectives were (the dumps a stalled run is read from)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from launcher.backends.base import Backend, NodeError, NodeLost
from launcher.events import RunState, StacksDumped
from launcher.runs.core.collectives import RankDump
from launcher.runs.owner.recorder import Recorder
from launcher.words import plural

DUMP_MAX_CHARS = 1 << 20
DUMPS_MAX = 1024
"""A node's word, bounded: characters of one rank's dump, and dumps taken from one node."""
MAX_FLIGHT_DUMPS = 1024
MAX_FLIGHT_CHARS = 1 << 20
"""What a node's flight recorder dumps may take of the record (the node's agent sends far less)."""


async def take_stacks(backend: Backend, rec: Recorder, ranks) -> list[RankDump]:
    """Ask every node in ``ranks`` at once (each may wait seconds for py-spy and its ranks' dumps), keep
    what each sends, say which could not; the flight-recorder dumps. A lost node is raised after the
    others have answered."""
    async def of_node(rank: int):
        try:
            return rank, await backend.stacks(rank)
        except NodeError as err:  # NodeLost is one too
            return rank, err

    flights: list[RankDump] = []
    for rank, dumps in await asyncio.gather(*(of_node(r) for r in ranks)):
        if isinstance(dumps, NodeLost):
            raise dumps
        if isinstance(dumps, NodeError):
            rec.set_state(RunState.RUNNING, f"no stack dump from node {rank}: {dumps}")
            continue
        flights += [RankDump(rank, d.rank, str(d.text)[:DUMP_MAX_CHARS]) for d in dumps
                    if d.how == "flight-recorder" and type(d.rank) is int][:DUMPS_MAX]
        await asyncio.to_thread(keep_stacks, rec, rank, dumps)
    return flights


def keep_stacks(rec: Recorder, rank: int, dumps) -> tuple[Path, str]:
    """Keep a node's stack dumps with the run; returns the file and a one-line summary."""
    folder = rec.dir / "stacks"
    folder.mkdir(exist_ok=True)
    stamp = time.strftime('%Y%m%d-%H%M%S')
    path = folder / f"{stamp}-node{rank}.txt"
    flights = [d for d in dumps if d.how == "flight-recorder" and type(d.rank) is int and d.rank >= 0]  # names a file
    for d in flights[:MAX_FLIGHT_DUMPS]:  # torch's recorder, kept as sent: its own analyser reads these too
        (folder / f"{stamp}-node{rank}-rank{d.rank}-flight-recorder.json").write_text(str(d.text)[:MAX_FLIGHT_CHARS])
    dumps = [d for d in dumps if d.how != "flight-recorder"]
    parts = []
    for d in dumps:
        who = f"rank {d.rank}" if d.rank is not None else "process"
        parts.append(f"=== node {rank}, {who}, pid {d.pid} ({d.how}) ===\n{d.text.rstrip()}\n")
    path.write_text("\n".join(parts) if parts else f"node {rank}: no Python process of the run is running\n")
    hows = sorted({d.how for d in dumps})
    summary = f"node {rank}: {plural(len(dumps), 'process')} ({', '.join(hows) or 'none running'})"
    if flights:
        summary += f", flight recorder of {plural(len(flights), 'rank')}"
    rec.emit(StacksDumped(rec.run_id, rank, str(path), summary))
    return path, summary
