"""Following each node of a run's attempt on its own: its output into the records (a long poll), its
status, its GPUs. A node that is reconnecting holds up only itself; a lost node ends its follower with
:class:`~launcher.backends.base.NodeLost`, which the policy turns into a failed run naming it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from launcher.backends.base import Backend, NodeError, NodeLost, NodeStatus
from launcher.events import NodeState
from launcher.runs.core.triage import gone_words
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.settings import READ_CHUNK, Settings, pace

GPU_LOST_SAMPLES = 2
"""GPU samples in a row that list fewer GPUs than the node had before it is judged to have lost one."""
GPU_RECHECK_S = 1.0
"""How soon a node that listed fewer GPUs is asked again."""


class NodeFollowing:
    """Owns the following of each node of one attempt: a follower per node (its output into the records by a
    long poll, its status, its GPUs and usage), the nodes' latest statuses, and which nodes were lost (with
    why), came back after a reconnect, or were found without their job. The run policy
    (:class:`~launcher.runs.owner.policy.RunPolicy`) composes one, starts a follower per node and judges
    what they saw; nothing here judges the run."""

    def __init__(self, backend: Backend, rec: Recorder, settings: Settings, clock: Callable[[], float],
                 ranks: list[int]) -> None:
        self.backend, self.rec, self.settings, self.clock, self.ranks = backend, rec, settings, clock, ranks
        self.statuses: dict[int, NodeStatus] = {}
        """Each node's latest status, as its follower (or the policy) last asked it."""
        self.lost: dict[int, str] = {}
        """Nodes whose link was lost, and why: the run fails naming the first."""
        self.gone: dict[int, str] = {}
        """Nodes of this attempt found without their job (restarted, their processes killed), and why."""
        self.reconnected: set[int] = set()
        """Nodes whose link came back during this attempt (a node that restarted comes back without its job)."""
        self.gpus_seen: dict[int, int] = {}
        """The most GPUs each node's ``nvidia-smi`` listed during this attempt."""
        self.gpus_short: dict[int, int] = {}
        """Samples in a row in which a node listed fewer GPUs than it had."""
        self.gpu_lost: dict[int, str] = {}
        """Nodes whose GPU vanished during this attempt (fell off the bus), and in words."""
        self.polled = asyncio.Event()
        """Set each time a follower has a node's new status: the policy judges then."""
        self.unfollowing = asyncio.Event()
        """Set when the attempt ends: the followers stop."""

    def new_attempt(self) -> None:
        """Forget what the last attempt's nodes said (a lost node stays lost)."""
        self.statuses.clear()
        self.gone.clear()
        self.reconnected.clear()
        self.gpus_seen.clear()
        self.gpus_short.clear()
        self.gpu_lost.clear()

    async def follow(self, rank: int) -> None:
        """Follow node ``rank`` until the attempt ends (:class:`NodeLost` ends it when its link is lost)."""
        last_gpus = last_status = -float("inf")
        poll_s, min_round_s = (x * pace(len(self.ranks)) for x in (self.settings.poll_s, self.settings.min_round_s))
        try:
            while not self.unfollowing.is_set():
                began = self.clock()
                got = await self.pump(rank, wait_s=poll_s)  # a long poll: back as output appears
                # While output flows the job is alive: its status is asked once a poll, not once a batch.
                # A read that found nothing (the poll ran out, or the job ended) asks at once.
                if not got or began - last_status >= poll_s:
                    self.statuses[rank] = await self.backend.status(rank)
                    last_status = began
                    self.polled.set()
                # A node that just listed fewer GPUs than it had is asked again soon: a lost GPU is seen in
                # seconds, not after another full round.
                every = min(self.settings.gpu_poll_s, GPU_RECHECK_S) if rank in self.gpus_short else self.settings.gpu_poll_s
                if self.clock() - last_gpus > every:
                    await self._sample_gpus(rank)
                    await self._sample_usage(rank)
                    last_gpus = self.clock()
                rest = min_round_s - (self.clock() - began)  # busy output: batches, not lines
                if rest > 0:
                    try:
                        await asyncio.wait_for(self.unfollowing.wait(), rest)
                    except asyncio.TimeoutError:
                        pass
        except NodeLost as err:
            self.lost[rank] = str(err)
            raise

    async def poll_the_others(self, exited: dict[int, NodeStatus]) -> list[int]:
        """Every node's status now, not as its follower last saw it: a node that died may not have been
        polled since, while the survivor its scheduler stopped already says it ended. A node that is
        reconnecting is waited for (within its link's window): one that comes back without its job (it
        restarted, its processes were killed) is why the others failed, and is named so. The nodes found
        without their job."""
        gone = []
        for rank in self.ranks:
            if rank in exited or rank in self.lost:
                continue
            try:
                status = await self.backend.status(rank)
            except NodeError:
                continue
            self.statuses[rank] = status
            if status.orphaned or (status.state == "absent" and status.attempt is None):
                self.mark_gone(rank, status)
                gone.append(rank)
        return gone

    def mark_gone(self, rank: int, status: NodeStatus) -> None:
        """Node ``rank`` is without its job: lost, with why."""
        self.gone[rank] = gone_words(status, rank in self.reconnected)
        self.rec.set_node(rank, NodeState.LOST, None, self.gone[rank])

    async def pump_all(self) -> None:
        """Every reachable node's output read to its end, into the records."""
        await asyncio.gather(*(self.pump(rank) for rank in self.ranks if rank not in self.lost),
                             return_exceptions=True)

    async def pump(self, rank: int, wait_s: float = 0.0) -> int:
        """Read a node's new output into the records; returns how many log bytes came."""
        got = 0
        while True:
            chunk = await self.backend.read(rank, "log", self.rec.log_offset(rank), READ_CHUNK, wait_s)
            wait_s = 0.0
            got += len(chunk)
            await asyncio.to_thread(self.rec.append_log, rank, chunk)
            if len(chunk) < READ_CHUNK:
                break
        if rank == 0:
            while True:
                chunk = await self.backend.read(0, "metrics", self.rec.metrics_offset(), READ_CHUNK)
                await asyncio.to_thread(self.rec.append_metrics, chunk)
                if len(chunk) < READ_CHUNK:
                    break
            while True:
                chunk = await self.backend.read(0, "samples", self.rec.samples_offset(), READ_CHUNK)
                await asyncio.to_thread(self.rec.append_samples, chunk)
                if len(chunk) < READ_CHUNK:
                    break
        return got

    async def _sample_gpus(self, rank: int) -> None:
        """GPU telemetry from ``nvidia-smi`` where there is one (nothing on CPU-only nodes)."""
        try:
            samples = await self.backend.gpus(rank)
        except NodeLost:
            raise
        except NodeError:
            return
        if samples:
            self.rec.gpus(rank, samples)
        self.count_gpus(rank, len(samples))

    def count_gpus(self, rank: int, count: int) -> None:
        """A node that listed GPUs and lists fewer in :data:`GPU_LOST_SAMPLES` samples in a row has lost one
        (``nvidia-smi`` fails, or leaves it out, once a GPU fell off the bus): the node has failed. One short
        sample is not enough (``nvidia-smi`` can time out on a busy machine)."""
        seen = self.gpus_seen.get(rank, 0)
        if count >= seen:
            self.gpus_seen[rank] = count
            self.gpus_short.pop(rank, None)
            return
        self.gpus_short[rank] = self.gpus_short.get(rank, 0) + 1
        if self.gpus_short[rank] >= GPU_LOST_SAMPLES and rank not in self.gpu_lost:
            now = "none" if count == 0 else str(count)
            self.gpu_lost[rank] = (f"lost its GPU: nvidia-smi listed {seen} and now lists {now} "
                                   "(a GPU that fell off the bus)")
            self.rec.set_node(rank, NodeState.LOST, None, self.gpu_lost[rank])
            self.polled.set()

    async def _sample_usage(self, rank: int) -> None:
        """What the node's job costs there (CPU use, RSS, processes), at the GPU samples' pace."""
        try:
            sample = await self.backend.usage(rank)
        except NodeLost:
            raise
        except NodeError:
            return
        if sample is not None:
            self.rec.usage(rank, sample)
