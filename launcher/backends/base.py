"""The Backend protocol: everything the launcher asks of the machines a run lives on, with typed replies.

The run policy, doctor, cancel, GPU samples and checkpoint operations ask this protocol and never
"is this local or SSH?". A backend owns how nodes are reached (a local pipe, SSH, a SLURM login node),
keeps reconnects inside itself and reports them as :class:`LinkState`, so a node that stays away is
LOST and every caller hears the same words. Add a backend: a folder (or module) under
``launcher/backends/`` with a class that satisfies :class:`Backend`, named in :mod:`launcher.backends.registry`
(this module imports no backend). The replies themselves, each decoded once where a node's words enter,
are in :mod:`launcher.backends.replies` and importable from here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Literal, Protocol, runtime_checkable

from launcher.backends.replies import (
    CheckpointListing,
    ExportResult,
    JobState,
    NodeInfo,
    NodeStatus,
    PortClaim,
    Reach,
    RemovedFiles,
    SchedulerCause,
    SchedulerCheck,
    ScriptRun,
    StackDump,
    StopOutcome,
    UsageSample,
)
from launcher.events import GpuSample
from launcher.workload.ckpt_place import CheckpointPlace
from launcher.workload.dry_run import DryRun
from launcher.workload.plan import RunPlan
from trainer.wire.ckpt_digest import Differs

__all__ = [
    "STREAM_FILES", "AgentStartFailed", "Backend", "CheckpointFiles", "CheckpointListing", "DirectCopy",
    "ExportResult", "JobState", "LinkState", "LinkWatcher", "NodeError", "NodeInfo", "NodeLost", "NodeStatus",
    "PortClaim", "PortTaken", "Reach", "RemovedFiles", "SchedulerCause", "SchedulerCheck", "ScriptRun",
    "StackDump", "StopOutcome", "Stream", "UsageSample",
]

Stream = Literal["log", "metrics", "samples"]
STREAM_FILES: dict[str, str] = {"log": "node.log", "metrics": "metrics.jsonl", "samples": "samples.jsonl"}


class NodeError(RuntimeError):
    """A node could not be prepared, reached or asked; the message names the node and what to do."""

    def __init__(self, message: str, node_rank: int | None = None) -> None:
        super().__init__(message)
        self.node_rank = node_rank
        """The node, where the error is about one node."""


class PortTaken(NodeError):
    """Node 0 could not claim the rendezvous port as its job started (another program took it after the
    launch claimed it, or an earlier claim lapsed): the run can move to another port."""


class NodeLost(NodeError):
    """A node's connection stayed away past the reconnect window."""


class AgentStartFailed(NodeError):
    """The node was reached but its agent could not start there (no such interpreter, an unwritable
    run root): retrying cannot help."""


class LinkState(str, enum.Enum):
    """How a node is reached right now."""

    OK = "ok"
    RECONNECTING = "reconnecting"
    LOST = "lost"


LinkWatcher = Callable[[int, LinkState, str], None]
"""Told ``(node rank, link state, detail)`` when a node's connection drops, comes back or is lost."""


class CheckpointFiles(Protocol):
    """One machine's checkpoint files (a node through its agent, or this machine), for gathers and
    copies: paths are a checkpoints folder that machine resolved, plus plain names."""

    label: str

    async def listing(self, root: str) -> CheckpointListing: ...

    async def files(self, root: str, name: str) -> tuple[dict[str, int], str | None]:
        """The checkpoint's files and sizes, and its ``meta.json`` (``None``: not there)."""
        ...

    async def read(self, root: str, name: str, file: str, offset: int, limit: int) -> bytes: ...

    async def put(self, root: str, name: str, file: str, offset: int, data: bytes) -> None:
        """One chunk of a copy, written beside the file (it takes its name at :meth:`seal`)."""
        ...

    async def seal(self, root: str, name: str, sums: dict[str, tuple[int, str]]) -> None:
        """Each copy checked against ``(size, sha256)`` and named; ``NodeError`` when one differs."""
        ...

    async def unpart(self, root: str, name: str, files: list[str] | None = None) -> None:
        """Copies that never took their name removed: those of ``files`` only, or every one."""
        ...

    async def drop(self, root: str, name: str, writer: str | None = None) -> None:
        """This machine's part of a checkpoint removed (a whole copy holds it elsewhere); with ``writer``,
        only when its ``meta.json`` names that run or none."""
        ...

    async def verify(self, root: str, name: str) -> tuple[Differs, ...]:
        """The checkpoint's bytes there against the trainer's digests; what differs is marked there."""
        ...

    async def mark(self, root: str, name: str, differs: tuple[Differs, ...]) -> None:
        """Files found to differ (by a copy's own hash) marked in the checkpoint: it is not whole then."""
        ...

    async def forget(self, root: str, name: str, files: list[str]) -> None:
        """Files a failed gather had copied into the checkpoint removed again."""
        ...

    async def room(self, root: str) -> int:
        """Bytes free where ``root`` is (or would be made)."""
        ...


@runtime_checkable
class DirectCopy(Protocol):
    """A node's checkpoint files sent straight to another node over TCP (no SSH between the nodes): the
    receiver listens for a one-time token, the sender sends, each says the SHA-256 it saw."""

    async def listen(self, root: str, name: str, sizes: dict[str, int], timeout_s: float) -> tuple[int, str]: ...

    async def received(self, token: str) -> dict[str, str]: ...

    async def send(self, root: str, name: str, sizes: dict[str, int], addr: str, port: int, token: str,
                   timeout_s: float) -> dict[str, str]: ...


class Backend(Protocol):
    """One run's machines. Calls about one node take its rank; fan-out calls answer for every node."""

    @property
    def plan(self) -> RunPlan:
        """The run's plan as the backend knows it now (:meth:`locate` and :meth:`use_plan` change it)."""
        ...

    def node_info(self, rank: int) -> NodeInfo: ...

    def dry_run(self) -> DryRun:
        """The dry run: per node its host, rank, directory, environment and command."""
        ...

    async def locate(self) -> RunPlan:
        """The plan with what only this backend knows filled in (node 0's address as the nodes dial it)."""
        ...

    def use_plan(self, plan: RunPlan) -> None:
        """Carry on with ``plan``: the same nodes, another rendezvous (a taken port moved)."""
        ...

    async def prepare(self) -> None:
        """Ship the agent, parameters, code snapshot and trainer; ``NodeError`` names every node that failed."""
        ...

    async def claim_port(self, port: int) -> PortClaim:
        """Whether node 0 can bind the rendezvous port, and a free one if not; port 0: any free port."""
        ...

    async def start(self, secrets: dict[str, str], attempt: int) -> None:
        """Start ``attempt`` on every node; ``NodeError`` names every node that failed."""
        ...

    async def status(self, rank: int) -> NodeStatus: ...

    async def read(self, rank: int, stream: Stream, offset: int, limit: int, wait_s: float = 0.0) -> bytes:
        """Bytes of a node's stream from ``offset``; with ``wait_s``, held until there are some or the job ended."""
        ...

    async def read_rank(self, rank: int, global_rank: int, offset: int, limit: int) -> bytes:
        """Bytes of one rank's own output (``rank-<R>.log`` in node ``rank``'s run directory) from ``offset``."""
        ...

    async def stop(self, grace_s: float, ranks: tuple[int, ...] | None = None) -> tuple[StopOutcome, ...]:
        """SIGTERM, grace, SIGKILL and a sweep on every node (or those of ``ranks``) at once; every node's
        outcome, never raising."""
        ...

    async def reach(self, rank: int, timeout_s: float) -> Reach:
        """Connect to the node and verify it as a launch would, starting nothing (the editor's glance)."""
        ...

    async def gpus(self, rank: int) -> tuple[GpuSample, ...]: ...

    async def usage(self, rank: int) -> UsageSample | None:
        """The node's job's CPU use, RSS and process count; ``None`` until the node has two samples to
        compare, or where the backend cannot tell."""
        ...

    async def run_script(self, rank: int, python: str, script: str, timeout_s: float) -> ScriptRun: ...

    async def stacks(self, rank: int) -> tuple[StackDump, ...]:
        """Every Python process of the job on a node: where each is (py-spy, else faulthandler)."""
        ...

    async def checkpoints(self, output_dir: str, rank: int = 0, root: str | None = None) -> CheckpointListing:
        """The checkpoints of ``output_dir`` on node ``rank`` (or in its folder ``root``: a gather's holder)."""
        ...

    async def delete_checkpoint(self, output_dir: str, name: str, rank: int = 0, root: str | None = None, *,
                                writer: str | None = None, continues: tuple[str, ...] = ()) -> None:
        """Remove the checkpoint ``name`` for the run ``writer`` (continuing ``continues``), when the
        ownership rule lets that run remove it (the node asks it again)."""
        ...

    async def export_checkpoint(self, output_dir: str, name: str, copy_to: str | None = None,
                                merged: bool = False, rank: int = 0, root: str | None = None,
                                url: str | None = None, job_env: dict[str, str] | None = None) -> ExportResult:
        """A Hugging Face folder of checkpoint ``name`` written on node ``rank`` (a bucket's: ``url``, read
        with ``job_env``); ``merged``: a LoRA checkpoint with its adapter merged into the base; with
        ``copy_to``, copied here too."""
        ...

    async def checkpoint_place(self, output_dir: str) -> CheckpointPlace:
        """Where ``output_dir`` lands on the nodes: node 0 writes a marker, the others look for it."""
        ...

    def checkpoint_files(self, rank: int) -> CheckpointFiles:
        """Node ``rank``'s checkpoint files, for gathers and copies."""
        ...

    async def remove_files(self, rank: int) -> RemovedFiles:
        """Remove the run's directory on that node (refused while its job runs there); never raising."""
        ...

    async def scheduler_checks(self, quick: bool) -> tuple[SchedulerCheck, ...]:
        """What the scheduler says of this run before it is submitted (none without a scheduler).
        ``quick``: only what a launch checks first (seconds, no job runs)."""
        ...

    async def scheduler_cause(self) -> SchedulerCause | None:
        """After a failed attempt: which node the scheduler saw die first, and how (``None`` without a
        scheduler, or when it said nothing)."""
        ...

    async def close(self) -> None: ...
