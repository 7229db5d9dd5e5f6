"""What a run's owner has logged to MLflow, as a type: ``mlflow.json`` beside the run's record (the MLflow
run id, how far each source is sent, the nodes' system metrics sent, the swaps tagged, the end it still
owes, the last failure). The file's keys are these fields' names; a file cut short or written by hand reads
as what it can say (a field it cannot read is as if nothing of it was sent: sent again, never lost)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

EndStatus = Literal["FINISHED", "FAILED", "KILLED"]
"""An MLflow run's end status, as the owner sends it."""


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass
class SystemSent:
    """How far ``events.jsonl`` was sent as system metrics: a byte offset, and each node's step count."""

    offset: int = 0
    steps: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Any) -> SystemSent:
        if not isinstance(data, dict):
            return cls()
        steps = data.get("steps")
        return cls(_count(data.get("offset")),
                   {str(k): _count(v) for k, v in steps.items()} if isinstance(steps, dict) else {})


@dataclass
class OwedEnd:
    """The run's end as the owner remembered it before sending it: its MLflow status, its totals
    (GPU-hours, cost), and whether it is sent."""

    status: EndStatus
    totals: dict[str, float] = field(default_factory=dict)
    sent: bool = False

    @classmethod
    def of(cls, data: Any) -> OwedEnd | None:
        if not isinstance(data, dict) or data.get("status") not in ("FINISHED", "FAILED", "KILLED"):
            return None
        totals = data.get("totals")
        return cls(cast(EndStatus, data["status"]), {str(k): float(v) for k, v in totals.items()
                                    if isinstance(v, (int, float)) and not isinstance(v, bool)}
                   if isinstance(totals, dict) else {}, data.get("sent") is True)


@dataclass
class MlflowNotes:
    """The tracker's notes on one run (``mlflow.json``); empty before it logged anything."""

    run_id: str | None = None
    source: str | None = None
    """Which of the run's records ``synced`` counts (``metrics``, or ``log-metrics`` parsed from the log)."""
    synced: int = 0
    samples_synced: int = 0
    system: SystemSent = field(default_factory=SystemSent)
    swap_tags: dict[str, str] | None = None
    end: OwedEnd | None = None
    error: str | None = None

    @classmethod
    def of(cls, data: Any) -> MlflowNotes:
        if not isinstance(data, dict):
            return cls()
        tags = data.get("swap_tags")
        return cls(run_id=_text(data.get("run_id")), source=_text(data.get("source")),
                   synced=_count(data.get("synced")), samples_synced=_count(data.get("samples_synced")),
                   system=SystemSent.of(data.get("system")),
                   swap_tags={str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else None,
                   end=OwedEnd.of(data.get("end")), error=_text(data.get("error")))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
