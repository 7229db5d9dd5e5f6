"""Typed events a running launch emits; the app and the headless CLI consume them.

Textual-free dataclasses: the TUI wraps them in messages, ``fsdp-tui run --json`` prints them. The values two
of them carry live beside them: a run's triage (:mod:`.triage`, in ``RunFinished``) and a swap
(:mod:`.swaps`, in ``NodeSwapped``), each encoded as the run's record keeps it and decoded once, here.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from typing import Any

from launcher.events.swaps import Swap
from launcher.events.triage import TriageReport
from trainer.wire.protocol import MetricRecord

ATTEMPT_MARKER = "=== fsdp-tui: attempt "
"""The start of the line a node's agent writes into its log when an attempt of a retried run starts."""


def last_attempt(text: str) -> str:
    """A node log from the start of its last attempt (all of it when there is no attempt marker)."""
    cut = text.rfind("\n" + ATTEMPT_MARKER)
    if cut >= 0:
        return text[cut + 1:]
    return text


class RunState(str, enum.Enum):
    """Where a run is in its life. The last four are final."""

    PENDING = "pending"
    PREFLIGHT = "preflight"
    STARTING = "starting"
    RUNNING = "running"
    RETRYING = "retrying"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def is_final(self) -> bool:
        return self in _FINAL


_FINAL = {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.TIMED_OUT}


class NodeState(str, enum.Enum):
    """One node as the launcher sees it."""

    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    RECONNECTING = "reconnecting"
    LOST = "lost"
    EXITED = "exited"
    STOPPED = "stopped"


@dataclass(frozen=True)
class RunStateChanged:
    run_id: str
    state: RunState
    attempt: int
    detail: str = ""


@dataclass(frozen=True)
class NodeStateChanged:
    run_id: str
    node_rank: int
    host: str
    state: NodeState
    exit_code: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class NodeLines:
    """A batch of complete log lines from one node (sanitised for display: no control sequences)."""

    run_id: str
    node_rank: int
    lines: tuple[str, ...]
    end_offset: int


@dataclass(frozen=True)
class MetricsRecorded:
    run_id: str
    record: MetricRecord


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    memory_used_mib: float
    memory_total_mib: float
    utilization_pct: float
    power_w: float | None = None
    """The GPU's power draw (watts); ``None`` where ``nvidia-smi`` does not say."""
    power_limit_w: float | None = None


@dataclass(frozen=True)
class GpuTelemetry:
    run_id: str
    node_rank: int
    gpus: tuple[GpuSample, ...]


@dataclass(frozen=True)
class NodeUsage:
    """What a node's job processes cost on that node, sampled by its agent (CPU-only nodes show this
    where GPU nodes show :class:`GpuTelemetry`): the job's whole process tree, summed."""

    run_id: str
    node_rank: int
    cpu_pct: float
    """CPU time over the last sample interval, in percent of one core (400.0: four cores busy)."""
    rss_mib: float
    processes: int
    sampled_at: float = 0.0
    """When the node took the sample (the node's clock, seconds since the epoch); 0.0 when unknown."""
    net_rx_mb: float | None = None
    """Megabytes the node received since the job's first sample (every interface but loopback)."""
    net_tx_mb: float | None = None


@dataclass(frozen=True)
class StacksDumped:
    """Every rank's stack on one node, taken on request (a hung run); the text is kept in ``path``."""

    run_id: str
    node_rank: int
    path: str
    summary: str
    """One line: how many processes, and how (py-spy, or faulthandler into the node's log)."""


@dataclass(frozen=True)
class NodeSwapped:
    """The run's owner replaced a failed node (a spare, an excluded SLURM node, or none: the run shrank), or a
    swap settled (the first step after it came, the resume checked). On the wire the swap is as the run's
    ``swaps.json`` keeps it (:meth:`Swap.to_dict`)."""

    run_id: str
    swap: Swap


@dataclass(frozen=True)
class RunFinished:
    run_id: str
    state: RunState
    exit_code: int | None = None
    triage: TriageReport | None = None
    """Why the run ended as it did; on the wire as its ``triage.json`` keeps it (:meth:`TriageReport.to_dict`)."""


RunEvent = (RunStateChanged | NodeStateChanged | NodeLines | MetricsRecorded | GpuTelemetry | NodeUsage
            | StacksDumped | NodeSwapped | RunFinished)


def event_to_dict(event: RunEvent) -> dict[str, Any]:
    """JSON-ready form with a ``type`` key (``fsdp-tui run --json``)."""
    data = asdict(event)
    if isinstance(event, MetricsRecorded):
        data["record"] = json.loads(event.record.to_json())
    elif isinstance(event, NodeSwapped):
        data["swap"] = event.swap.to_dict()
    elif isinstance(event, RunFinished):
        data["triage"] = event.triage.to_dict() if event.triage is not None else None
    for key, value in data.items():
        if isinstance(value, enum.Enum):
            data[key] = value.value
    return {"type": type(event).__name__, **data}


_EVENT_TYPES = {cls.__name__: cls for cls in (RunStateChanged, NodeStateChanged, NodeLines, MetricsRecorded,
                                              GpuTelemetry, NodeUsage, StacksDumped, NodeSwapped, RunFinished)}


def event_from_dict(data: dict[str, Any]) -> RunEvent | None:
    """The inverse of :func:`event_to_dict` (``None`` for a type this version does not know, or a swap it
    cannot read). Records of older versions read the same: their triage and swap dicts are decoded as kept."""
    kind = _EVENT_TYPES.get(data.get("type", ""))
    if kind is None:
        return None
    fields = {k: v for k, v in data.items() if k not in ("type", "at")}  # "at": when a record wrote it
    if kind is RunStateChanged:
        fields["state"] = RunState(fields["state"])
    elif kind is NodeStateChanged:
        fields["state"] = NodeState(fields["state"])
    elif kind is RunFinished:
        fields["state"] = RunState(fields["state"])
        fields["triage"] = TriageReport.from_wire(fields.get("triage"))
    elif kind is NodeSwapped:
        fields["swap"] = Swap.from_wire(fields["swap"])
        if fields["swap"] is None:
            return None
    elif kind is GpuTelemetry:
        fields["gpus"] = tuple(GpuSample(**g) for g in fields.get("gpus", ()))
    elif kind is NodeLines:
        fields["lines"] = tuple(fields["lines"])
    elif kind is MetricsRecorded:
        fields["record"] = MetricRecord.from_dict(fields["record"])
    return kind(**fields)
