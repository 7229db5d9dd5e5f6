"""Every rank's stack on every reachable node, taken at once and kept with the run; with torch's flight
recorder, what each rank's last collectives were (the dumps a stalled run is read from)."""

from __future__ import annotations

import asyncio

from launcher.backends.base import Backend, NodeError, NodeLost
from launcher.events import RunState
from launcher.runs.core.collectives import RankDump
from launcher.runs.owner.recorder import Recorder

DUMP_MAX_CHARS = 1 << 20
DUMPS_MAX = 1024
"""A node's word, bounded: characters of one rank's dump, and dumps taken from one node."""


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
        await asyncio.to_thread(rec.save_stacks, rank, dumps)
    return flights
