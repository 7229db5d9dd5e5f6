"""Typed events a running launch emits; the app and the headless CLI consume them.

Textual-free dataclasses: the TUI wraps them in messages, ``fsdp-tui run --json`` prints them.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.protocol import MetricRecord


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
    """A batch of complete log lines from one node (ANSI codes already stripped)."""

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


@dataclass(frozen=True)
class GpuTelemetry:
    run_id: str
    node_rank: int
    gpus: tuple[GpuSample, ...]


@dataclass(frozen=True)
class RunFinished:
    run_id: str
    state: RunState
    exit_code: int | None = None
    triage: dict[str, Any] | None = field(default=None)


RunEvent = RunStateChanged | NodeStateChanged | NodeLines | MetricsRecorded | GpuTelemetry | RunFinished


def event_to_dict(event: RunEvent) -> dict[str, Any]:
    """JSON-ready form with a ``type`` key (``fsdp-tui run --json``)."""
    data = asdict(event)
    if isinstance(event, MetricsRecorded):
        data["record"] = json.loads(event.record.to_json())
    for key, value in data.items():
        if isinstance(value, enum.Enum):
            data[key] = value.value
    return {"type": type(event).__name__, **data}
