"""What happened to one sink of a notification, as a run's record keeps it: a record alone, so that
reading a run's deliveries (``fsdp-tui show``) loads none of the sinks or the settings' models."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Delivery:
    sink: str
    ok: bool
    attempts: int
    error: str = ""
    at: float = 0.0
    event: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: object) -> Delivery | None:
        """A delivery as the run's record keeps it (``None``: a line that is not one)."""
        if not isinstance(data, dict):
            return None
        sink, ok, attempts = data.get("sink"), data.get("ok"), data.get("attempts")
        error, at, event = data.get("error", ""), data.get("at", 0.0), data.get("event", "")
        if not (isinstance(sink, str) and isinstance(ok, bool) and isinstance(attempts, int)
                and not isinstance(attempts, bool) and isinstance(error, str) and isinstance(event, str)
                and isinstance(at, (int, float)) and not isinstance(at, bool)):
            return None
        return cls(sink, ok, attempts, error, float(at), event)
