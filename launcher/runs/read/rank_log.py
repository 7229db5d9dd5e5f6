"""One rank's own output, read where it is kept: ``rank-<R>.log`` in the run directory of the node that ran
it (the node's agent splits torchrun's tagged output by rank: ``launcher.backends.agent.ranklogs``). The
run's record keeps each node's combined log; a rank's own is asked of its node, so that node must answer
(and its run directory still be there)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

from launcher.runs.core.layout import load_plan
from launcher.runs.core.store import RunStore
from launcher.words import node_at

QUICK_SSH = {"connect_timeout_s": 10.0, "lost_after_s": 10.0}
"""A look, not a run: a node that does not answer is said at once."""
CHUNK = 1 << 20


class RankLogError(LookupError):
    """Why a rank's output cannot be read: no such rank, no plan on record, the node does not answer."""


class RankLog:
    """Reads one rank's output from its node, from where the last read stopped."""

    def __init__(self, home: Path, run_id: str, rank: int) -> None:
        from launcher.backends.registry import backend_for

        record = RunStore(home).get_run(run_id)
        if record is None:
            raise RankLogError(f"no run '{run_id}'")
        try:
            plan = load_plan(record.directory)
        except (OSError, ValueError, KeyError):
            raise RankLogError(f"run {run_id} has no plan on record: its ranks are not known") from None
        world, per_node = plan.topology.world_size, plan.topology.procs_per_node
        if not 0 <= rank < world:
            raise RankLogError(f"run {run_id} has ranks 0-{world - 1}")
        self.rank = rank
        self.node = rank // per_node
        """The node that ran it (torchrun numbers a node's ranks from ``node_rank x procs_per_node``)."""
        self.label = f"rank {rank} on {node_at(self.node, plan.nodes[self.node].host_display)}"
        ssh = plan.workload.ssh.model_copy(update=QUICK_SSH)
        self.backend = backend_for(dataclasses.replace(plan, workload=plan.workload.model_copy(update={"ssh": ssh})))
        self.offset = 0

    async def chunks(self) -> AsyncIterator[bytes]:
        """What the rank wrote since the last read, chunk by chunk as its node sends it (at most
        :data:`CHUNK` bytes each), until it has all of it for now: a reader holds one chunk at a time, so
        its memory follows the chunk, not the log, whatever the log's size. ``RankLogError`` when its
        node cannot be asked."""
        from launcher.backends.base import NodeError

        while True:
            try:
                data = await self.backend.read_rank(self.node, self.rank, self.offset, CHUNK)
            except NodeError as err:
                raise RankLogError(f"{self.label}: cannot be read: {err}") from None
            self.offset += len(data)
            if data:
                yield data
            if len(data) < CHUNK:
                return

    async def close(self) -> None:
        await self.backend.close()


def ranks_of_node(home: Path, run_id: str, node: int) -> list[int]:
    """The global ranks node ``node`` of the run ran (empty: no plan on record)."""
    record = RunStore(home).get_run(run_id)
    try:
        plan = load_plan(record.directory) if record is not None else None
    except (OSError, ValueError, KeyError):
        plan = None
    if plan is None or not 0 <= node < len(plan.nodes):
        return []
    per_node = plan.topology.procs_per_node
    return list(range(node * per_node, (node + 1) * per_node))
