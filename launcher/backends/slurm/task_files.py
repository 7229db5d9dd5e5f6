"""What each node's SLURM task answers through its folder on the shared filesystem, where the launcher
cannot reach a compute node itself: GPU and usage samples it writes every few seconds, and the stack
dumps asked of it with a request file (:mod:`launcher.backends.agent.slurm_task` writes them)."""

from __future__ import annotations

import asyncio
import json
import time

from launcher.backends.agent.slurm_task import GPU_FILE, STACKS_FILE, STACKS_REQUEST, USAGE_SAMPLE_FILE
from launcher.backends.base import NodeError
from launcher.backends.fleet import AgentFleet
from launcher.backends.replies import StackDump, UsageSample, gpus_from_wire
from launcher.events import GpuSample
from launcher.untrusted import clean_reply

SAMPLE_STALE_S = 30.0
"""A sample older than this is a task that stopped sampling (its job ended): no figure rather than an old one."""
STACKS_WAIT_S = 30.0
STACKS_POLL_S = 0.5


def _json(data: bytes) -> object:
    """A file a node's task wrote, decoded (``None`` when empty, or being replaced as it was read)."""
    try:
        return clean_reply(json.loads(data)) if data else None
    except ValueError:
        return None


def _fresh(sample: object) -> bool:
    """Written within :data:`SAMPLE_STALE_S` by the node's clock (``at``)."""
    at = sample.get("at") if isinstance(sample, dict) else None
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        return False
    return time.time() - at <= SAMPLE_STALE_S


class TaskFiles:
    """Owns reading what the nodes' tasks leave in their folders (through each node's link of the
    fleet, which reaches its folder from the login node)."""

    def __init__(self, fleet: AgentFleet) -> None:
        self.fleet = fleet

    async def _read(self, rank: int, name: str, limit: int) -> bytes:
        _, data = await self.fleet.links[rank].call("read", name=name, offset=0, limit=limit)
        return data

    async def gpus(self, rank: int) -> tuple[GpuSample, ...]:
        """What the node's task sampled (``nvidia-smi`` on the compute node, every few seconds)."""
        sample = _json(await self._read(rank, GPU_FILE, 1 << 20))
        return gpus_from_wire(sample) if _fresh(sample) else ()

    async def usage(self, rank: int) -> UsageSample | None:
        """What the node's task sampled of its job (CPU use, RSS, processes, every few seconds)."""
        sample = UsageSample.from_wire(_json(await self._read(rank, USAGE_SAMPLE_FILE, 1 << 16)))
        if sample is None or time.time() - sample.sampled_at > SAMPLE_STALE_S:
            return None
        return sample

    async def stacks(self, rank: int) -> tuple[StackDump, ...]:
        """Asked of the node's task through its folder (``stacks-request``), which answers with py-spy's
        dumps (or the trainer's faulthandler) in ``stacks.json``."""
        token = f"{time.time():.6f}"
        link = self.fleet.links[rank]
        await link.call("write", token.encode(), name=STACKS_REQUEST)
        deadline = time.monotonic() + STACKS_WAIT_S
        while time.monotonic() < deadline:
            answer = _json(await self._read(rank, STACKS_FILE, 16 << 20))  # None: being replaced, read again
            if isinstance(answer, dict) and answer.get("request") == token:
                return StackDump.many_from_wire(answer.get("stacks"))
            await asyncio.sleep(STACKS_POLL_S)
        raise NodeError(f"{self.fleet.label(rank)}: its SLURM task did not answer the stack dump within "
                        f"{STACKS_WAIT_S:.0f} s (is the job running?)", rank)
