"""The typed replies of the :class:`~launcher.backends.base.Backend` protocol: what a node said, decoded once
where it enters.

Everything a node sends is untrusted (its agent's replies, the files its job writes): each ``from_wire``
takes the decoded JSON as it came and keeps only fields of the right type, strings made printable, numbers
within what a node can have, so nothing downstream has to check again. The protocol's module
(:mod:`launcher.backends.base`) holds the calls; this one the words they answer with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from launcher.events import GpuSample
from launcher.untrusted import network_figures, printable, usage_figures
from trainer.wire.ckpt_layout import CheckpointInfo, plain_name, run_id_or_none

JobState = Literal["absent", "starting", "running", "exited"]


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


def _text(value: object, newlines: bool = False) -> str:
    return printable(value, newlines) if isinstance(value, str) else ""


def _figure(value: object, ceiling: float) -> float | None:
    """A figure a node can have: a number (not a bool) from 0 to ``ceiling``; NaN and infinity fail."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if 0.0 <= value <= ceiling else None


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


MAX_GPU_MIB = float(1 << 24)
"""16 TiB of memory on one GPU is no GPU's figure."""
MAX_GPU_WATTS = 1e5
MAX_GPUS = 1024
"""More GPUs than this in one node are not a node's answer."""


def gpus_from_wire(data: object) -> tuple[GpuSample, ...]:
    """A node's GPU samples (its agent's ``gpus`` reply, or the ``gpus.json`` a SLURM task wrote), one per
    GPU: an entry whose index, name, memory or utilisation is not a figure a GPU can have is left out, a
    power figure of the wrong kind reads as unknown, the name comes out printable."""
    entries = data.get("gpus") if isinstance(data, dict) else None
    samples = []
    for entry in entries if isinstance(entries, list) else ():
        entry = entry if isinstance(entry, dict) else {}
        index, name = _int(entry.get("index")), entry.get("name")
        used, total = _figure(entry.get("memory_used_mib"), MAX_GPU_MIB), _figure(entry.get("memory_total_mib"), MAX_GPU_MIB)
        util = _figure(entry.get("utilization_pct"), 100.0)
        if (index is None or not 0 <= index < MAX_GPUS or not isinstance(name, str) or used is None
                or total is None or util is None):
            continue
        samples.append(GpuSample(index, _text(name), used, total, util, _figure(entry.get("power_w"), MAX_GPU_WATTS),
                                 _figure(entry.get("power_limit_w"), MAX_GPU_WATTS)))
        if len(samples) == MAX_GPUS:
            break
    return tuple(samples)


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
                                        saved=c.get("saved") is True, adapter=c.get("adapter") is True,
                                        run_id=run_id_or_none(c.get("run_id")), why=_text(c.get("why"))[:500]))
        return cls(rank, label, _text(data.get("root")) or output_dir, tuple(ckpts), data.get("exists") is True)


def _missing(value: object) -> tuple[tuple[str, int], ...]:
    """A listed checkpoint's missing shards, ``(file, node)``: entries of another shape are left out."""
    out = []
    for entry in value if isinstance(value, list) else ():
        if (isinstance(entry, list) and len(entry) == 2 and plain_name(entry[0])
                and _int(entry[1]) is not None and entry[1] >= 0):
            out.append((entry[0], entry[1]))
    return tuple(out)


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
