"""The memory a run predicted for each rank, said once at its start (a ``fit`` record at step 0), and read
back beside what each rank measured (``show``, the monitor, MLflow). Standard library only: the trainer
writes it, the launcher reads it as untrusted input (a node sends it)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.wire.protocol import MetricRecord, RankMemory

KIND_FIT = "fit"
_PARTS_MAX = 8


@dataclass(frozen=True)
class FitSummary:
    """One rank's predicted peak (every rank alike) and what it is measured against."""

    expected_gib: float
    """What a rank's measured peak is compared with: the tensors' peak on a GPU (``peak_gib``); on CPU the
    process's (``peak_rss_gib``): its memory before the model plus the predicted peak."""
    need_gib: float
    """What a rank needs of its memory (the peak, the CUDA context and the allocator's slack, or the CPU
    process), against ``memory_gib``."""
    device: str
    """``cuda`` or ``cpu``."""
    sharding: str
    world: int
    memory_gib: float | None = None
    """A rank's memory (the GPU's, or the node's RAM over its ranks)."""
    parts: Mapping[str, float] = field(default_factory=dict)
    """The predicted peak's parts (params, grads, optimizer, gathered, activations, loss), GiB."""

    def record(self) -> MetricRecord:
        return MetricRecord(step=0, kind=KIND_FIT, extra={**asdict(self), "parts": dict(self.parts)})

    @classmethod
    def from_record(cls, record: MetricRecord) -> FitSummary | None:
        """The summary a ``fit`` record carries, cleaned; ``None`` for another record or a malformed one."""
        if record.kind != KIND_FIT:
            return None
        e = record.extra
        numbers = {k: e.get(k) for k in ("expected_gib", "need_gib")}
        if not all(_gib(v) is not None for v in numbers.values()):
            return None
        device, sharding, world = e.get("device"), e.get("sharding"), e.get("world")
        if device not in ("cuda", "cpu") or not isinstance(sharding, str) or not sharding.isidentifier() \
                or len(sharding) > 20 or not isinstance(world, int) or isinstance(world, bool) or world < 1:
            return None
        parts = e.get("parts") if isinstance(e.get("parts"), dict) else {}
        clean = {k: v for k, v in list(parts.items())[:_PARTS_MAX]
                 if isinstance(k, str) and len(k) <= 20 and all(c.isalnum() or c in " ()_" for c in k)
                 and _gib(v) is not None}
        return cls(expected_gib=float(numbers["expected_gib"]), need_gib=float(numbers["need_gib"]), device=device,
                   sharding=sharding, world=world, memory_gib=_gib(e.get("memory_gib")), parts=clean)

    def words(self) -> str:
        """``0.62 GiB a rank predicted (full_shard, 2 ranks), needs 1.2 GiB of 11.7``."""
        basis = "tensors" if self.device == "cuda" else "process"
        of = f" of {self.memory_gib:.1f}" if self.memory_gib is not None else ""
        return (f"{self.expected_gib:.2f} GiB a rank predicted ({basis}; {self.sharding}, {self.world} "
                f"rank{'s' if self.world != 1 else ''}), needs {self.need_gib:.1f} GiB{of}")


def _gib(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


@dataclass(frozen=True)
class MemoryCheck:
    """The prediction beside what the ranks measured: the highest peak, its rank, and the difference."""

    fit: FitSummary
    peak_gib: float | None
    """The highest measured peak over the ranks (``None``: no rank reported one yet)."""
    peak_rank: int | None
    ranks: int
    """How many ranks reported a peak."""

    @property
    def error(self) -> float | None:
        """(measured - predicted) / predicted."""
        if self.peak_gib is None or not self.fit.expected_gib:
            return None
        return (self.peak_gib - self.fit.expected_gib) / self.fit.expected_gib

    def words(self) -> str:
        """``peak 0.71 GiB (rank 1 of 2) against 0.62 GiB predicted (+15%), needs 1.2 GiB of 11.7``."""
        if self.peak_gib is None:
            return f"{self.fit.words()}; no rank has reported its peak yet"
        of = f" of {self.fit.memory_gib:.1f} a rank" if self.fit.memory_gib is not None else ""
        return (f"peak {self.peak_gib:.2f} GiB (rank {self.peak_rank} of {self.ranks}) against {self.fit.expected_gib:.2f}"
                f" GiB predicted ({self.error:+.0%}; {self.fit.sharding}), needs ~{self.fit.need_gib:.1f} GiB{of}")


def memory_check(records: Iterable[MetricRecord]) -> MemoryCheck | None:
    """The run's prediction (its first ``fit`` record) beside each rank's highest measured peak; ``None``
    for a run that predicted nothing (a user script, an older trainer)."""
    fit: FitSummary | None = None
    peaks: dict[int, float] = {}
    for record in records:
        if fit is None and record.kind == KIND_FIT:
            fit = FitSummary.from_record(record)
        for mem in record.memory:
            _peak(peaks, mem)
    if fit is None:
        return None
    if not peaks:
        return MemoryCheck(fit, None, None, 0)
    rank = max(peaks, key=peaks.__getitem__)
    return MemoryCheck(fit, peaks[rank], rank, len(peaks))


def _peak(peaks: dict[int, float], mem: RankMemory) -> None:
    value = _gib(mem.measured_peak_gib)
    if value is not None and isinstance(mem.rank, int) and not isinstance(mem.rank, bool):
        peaks[mem.rank] = max(value, peaks.get(mem.rank, 0.0))
