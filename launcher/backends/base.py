"""The Backend protocol: everything the launcher asks of the machines a run lives on, with typed replies.

The run policy, doctor, cancel, GPU samples and checkpoint operations ask this protocol and never
"is this local or SSH?". A backend owns how nodes are reached (a local pipe, SSH, a SLURM login node),
keeps reconnects inside itself and reports them as :class:`LinkState`, so a node that stays away is
LOST and every caller hears the same words. Add a backend: a folder (or module) under
``launcher/backends/`` with a class that satisfies :class:`Backend`, named in :mod:`launcher.backends.registry`
(this module imports no backend).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from launcher.events import GpuSample
from launcher.untrusted import network_figures, printable, usage_figures
from launcher.workload.ckpt_place import CheckpointPlace
from launcher.workload.plan import RunPlan
from trainer.ckpt_layout import CheckpointInfo, plain_name

Stream = Literal["log", "metrics", "samples"]
STREAM_FILES: dict[str, str] = {"log": "node.log", "metrics": "metrics.jsonl", "samples": "samples.jsonl"}
JobState = Literal["absent", "starting", "running", "exited"]


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


@dataclass(frozen=True)
class NodeInfo:
    """How a node is reached and what runs there, in words."""

    rank: int
    label: str
    python: str
    """The interpreter the node's job runs with."""
    local: bool
    """This machine, no SSH."""


@dataclass(frozen=True)
class NodeStatus:
    """A node's job as its agent records it."""

    rank: int
    state: JobState
    attempt: int | None = None
    exit_code: int | None = None
    stopped: bool = False
    """It ended because it was asked to stop."""
    supervisor_alive: bool = False
    """The node-side process that records the job is there (it must be while the job runs)."""
    error: str = ""
    """Why the node could not record the job (e.g. its disk is full)."""
    queued: str = ""
    """Why the job waits in a scheduler's queue (``pending: Resources``); empty once it has its nodes."""
    resubmit: str = ""
    """Why the job ended early to go on in a new submission (``time limit``: it saved a checkpoint first)."""
    ended_at: float | None = None
    """When the job ended, by the node's clock (an owner that adopts a run after its end records that time)."""
    requeued: str = ""
    """The scheduler put the attempt's job back into its queue (``requeued by SLURM (by an operator)``):
    the attempt has ended and the job's next run is a new attempt."""

    @classmethod
    def from_wire(cls, rank: int, data: object) -> NodeStatus:
        """A node's status reply (its ``state.json``, which the job itself could write): fields of the wrong
        type read as absent, strings come out printable."""
        data = data if isinstance(data, dict) else {}
        state = data.get("state")
        ended = data.get("ended_at")
        return cls(rank, state if state in ("starting", "running", "exited") else "absent", _int(data.get("attempt")),
                   _int(data.get("exit_code")), data.get("stopped") is True, data.get("supervisor_alive") is True,
                   _text(data.get("error")), resubmit=_text(data.get("resubmit")),
                   ended_at=float(ended) if isinstance(ended, (int, float)) and not isinstance(ended, bool) else None)

    @property
    def orphaned(self) -> bool:
        """Recorded as running, but nothing on the node is recording it any more."""
        return self.state in ("starting", "running") and not self.supervisor_alive


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _text(value: object) -> str:
    return printable(value) if isinstance(value, str) else ""


@dataclass(frozen=True)
class StopOutcome:
    """What stopping one node did. Never raised: a node that cannot be reached says so in ``error``."""

    rank: int
    label: str
    stopped: bool
    left: tuple[int, ...] = ()
    """Processes of the run still alive after SIGKILL."""
    was: str | None = None
    """The job's state before the stop (``exited``: there was nothing left to stop)."""
    found: bool = False
    """Processes of the run were found and signalled."""
    error: str = ""


@dataclass(frozen=True)
class PortClaim:
    free: bool
    reason: str = ""
    suggest: int | None = None
    port: int | None = None
    """The port found free: the one asked for, or the one the system picked when asked for port 0."""


@dataclass(frozen=True)
class ScriptRun:
    """A short script run on a node under some interpreter (the doctor's probe)."""

    exit_status: int | None
    stdout: str
    stderr: str


@dataclass(frozen=True)
class StackDump:
    """One process of a node's job and where it was when asked."""

    pid: int
    rank: int | None
    """Its global rank (``RANK`` in its environment), when it is a worker."""
    how: Literal["py-spy", "faulthandler", "flight-recorder", "none"]
    text: str
    """py-spy's dump; for ``faulthandler`` the dump is in the node's log; for ``flight-recorder``, torch's
    recorder of the rank's collectives as JSON (``pid`` 0); for ``none``, why not."""

    @classmethod
    def from_wire(cls, data: object) -> StackDump | None:
        """One entry of a node's ``stacks`` reply (what py-spy or the trainer wrote there): ``None`` for an
        entry that is not a dump's shape; ``how`` outside the known kinds reads as ``none``. The text is
        kept as sent (many lines), bounded where it is stored."""
        if not isinstance(data, dict) or _int(data.get("pid")) is None:
            return None
        how = data.get("how")
        text = data.get("text")
        return cls(_int(data.get("pid")) or 0, _int(data.get("rank")),
                   how if how in ("py-spy", "faulthandler", "flight-recorder") else "none",
                   text if isinstance(text, str) else "")

    @classmethod
    def many_from_wire(cls, data: object) -> tuple[StackDump, ...]:
        """A node's whole ``stacks`` list, each entry decoded once; what is not a dump is left out."""
        dumps = (cls.from_wire(d) for d in (data if isinstance(data, list) else []))
        return tuple(d for d in dumps if d is not None)


@dataclass(frozen=True)
class CheckpointListing:
    """The checkpoints under a run's ``output_dir`` on the node that holds them (rank 0's)."""

    rank: int
    label: str
    root: str
    checkpoints: tuple[CheckpointInfo, ...] = ()
    exists: bool = True
    error: str = ""
    """Why the node could not be asked (it is gone, say): never the same as "no checkpoints"."""

    @classmethod
    def from_wire(cls, rank: int, label: str, output_dir: str, data: object) -> CheckpointListing:
        """A node's ``ckpt_list`` reply: entries that are not a checkpoint's shape are left out, names and
        paths come out printable on one line (a name is shown, and passed back, as data)."""
        data = data if isinstance(data, dict) else {}
        entries = data.get("checkpoints")
        ckpts = []
        for c in entries if isinstance(entries, list) else ():
            c = c if isinstance(c, dict) else {}
            step, path = _int(c.get("step")), _text(c.get("path"))
            if step is None or not path:
                continue
            ckpts.append(CheckpointInfo(step, path, c.get("complete") is True and c.get("link") is not True,
                                        max(_int(c.get("size_bytes")) or 0, 0), _number(c.get("mtime")),
                                        link=c.get("link") is True, missing=_missing(c.get("missing")),
                                        saved=c.get("saved") is True, adapter=c.get("adapter") is True))
        return cls(rank, label, _text(data.get("root")) or output_dir, tuple(ckpts), data.get("exists") is True)


def _missing(value: object) -> tuple[tuple[str, int], ...]:
    """A listed checkpoint's missing shards, ``(file, node)``: entries of another shape are left out."""
    out = []
    for entry in value if isinstance(value, list) else ():
        if (isinstance(entry, list) and len(entry) == 2 and plain_name(entry[0])
                and _int(entry[1]) is not None and entry[1] >= 0):
            out.append((entry[0], entry[1]))
    return tuple(out)


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

    async def unpart(self, root: str, name: str) -> None: ...

    async def drop(self, root: str, name: str) -> None:
        """This machine's part of a checkpoint removed (a whole copy holds it elsewhere)."""
        ...


@runtime_checkable
class DirectCopy(Protocol):
    """A node's checkpoint files sent straight to another node over TCP (no SSH between the nodes): the
    receiver listens for a one-time token, the sender sends, each says the SHA-256 it saw."""

    async def listen(self, root: str, name: str, sizes: dict[str, int], timeout_s: float) -> tuple[int, str]: ...

    async def received(self, token: str) -> dict[str, str]: ...

    async def send(self, root: str, name: str, sizes: dict[str, int], addr: str, port: int, token: str,
                   timeout_s: float) -> dict[str, str]: ...


@dataclass(frozen=True)
class ExportResult:
    path: str
    """The Hugging Face folder on the node."""
    files: tuple[str, ...] = field(default=())
    local_copy: str | None = None
    """Where it was copied on this machine, when asked."""
    merged: str | None = None
    """A LoRA checkpoint exported ``merged``: the folder of the base with the adapter merged (``path`` holds
    the adapter in PEFT's format)."""
    merged_copy: str | None = None
    """Where the merged folder was copied on this machine, when asked."""
    reused: bool = False
    """The trainer had exported this step itself: that folder is the export (nothing was written)."""


@dataclass(frozen=True)
class RemovedFiles:
    """What removing a run's directory on one node did. Never raised: a node that cannot be reached, or
    whose job still runs, says so in ``error``."""

    rank: int
    label: str
    path: str
    bytes: int = 0
    files: int = 0
    error: str = ""

    @classmethod
    def from_wire(cls, rank: int, label: str, path: str, data: object) -> RemovedFiles:
        data = data if isinstance(data, dict) else {}
        return cls(rank, label, _text(data.get("path")) or path, max(_int(data.get("bytes")) or 0, 0),
                   max(_int(data.get("files")) or 0, 0))


@dataclass(frozen=True)
class UsageSample:
    """What a node's job costs there now (its whole process tree), as the node sampled it."""

    cpu_pct: float
    """CPU time since the node's previous sample, in percent of one core."""
    rss_mib: float
    processes: int
    sampled_at: float
    """The node's clock; 0.0 when it did not say."""
    net_rx_mb: float | None = None
    """Megabytes the node received (every interface but loopback) since its job's first sample."""
    net_tx_mb: float | None = None

    @classmethod
    def from_wire(cls, data: object) -> UsageSample | None:
        """A node's ``usage`` reply; ``None`` when it holds no usable figure (see :func:`usage_figures`)."""
        figures = usage_figures(data)
        return None if figures is None else cls(*figures, *(network_figures(data) or (None, None)))


@dataclass(frozen=True)
class Reach:
    """Whether a node answers, checked cheaply (connect and verify its host key; nothing runs there)."""

    rank: int
    label: str
    ok: bool
    detail: str
    blocker: bool = False
    """Not reached for a reason only the user can change (an unknown or changed host key, a refused key,
    a bad config line), as opposed to a node that may still answer: a launch stops before it starts."""


@dataclass(frozen=True)
class SchedulerCheck:
    """One thing a scheduler's backend checked about where the run would go (SLURM: the partition, the
    account and time limit through ``sbatch --test-only``, a probe job on the compute nodes)."""

    name: str
    status: Literal["ok", "warning", "error"]
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class SchedulerCause:
    """What a scheduler says ended an attempt's job: the node that went first, in the scheduler's own
    words (SLURM: ``srun: error: n2: task 1: Killed``), ahead of anything the nodes' logs say."""

    rank: int | None
    """The node of the run, when the scheduler's words name one."""
    host: str
    signature: str
    """``node_fail``, ``oom``, ``killed``, ``exited``, ``time_limit``, ``preempted``..."""
    words: str
    """The scheduler's line(s), with what else it knows (the node's state in ``sinfo``, ``sacct``'s steps)."""


class Backend(Protocol):
    """One run's machines. Calls about one node take its rank; fan-out calls answer for every node."""

    plan: RunPlan

    def node_info(self, rank: int) -> NodeInfo: ...

    def render(self) -> str:
        """The dry-run text: per node its host, rank, directory, environment and command."""
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

    async def delete_checkpoint(self, output_dir: str, name: str, rank: int = 0, root: str | None = None) -> None: ...

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
