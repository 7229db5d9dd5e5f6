"""The metrics wire format between rank 0 of a job and the launcher.

Stdlib only: the launcher (no torch) decodes what the trainer (or a user script through
:mod:`trainer.reporter`) writes. One JSON object per line in ``FSDP_TUI_METRICS_FILE``.
Unknown keys are kept in ``extra`` so newer trainers never break older launchers.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

METRICS_FILE_ENV = "FSDP_TUI_METRICS_FILE"
RUN_ID_ENV = "FSDP_TUI_RUN_ID"
CHECKPOINT_SIGNAL_ENV = "FSDP_TUI_CHECKPOINT_ON_SIGNAL"
"""Set to ``1`` by a backend that sends SIGUSR1 to the trainer's worker processes when the job's time is
nearly up: the built-in trainer then saves a checkpoint at the next step boundary and exits 0."""

_KIND_TRAIN = "train"
_KIND_EVAL = "eval"
_KIND_SIGNAL_CHECKPOINT = "signal_checkpoint"
KIND_DATA = "data"


@dataclass(frozen=True)
class RankMemory:
    """Memory of one rank, in GiB. On CPU only ``rss_gib`` is known."""

    rank: int
    allocated_gib: float | None = None
    reserved_gib: float | None = None
    peak_gib: float | None = None
    total_gib: float | None = None
    rss_gib: float | None = None
    device_used_gib: float | None = None
    """The card's memory in use (total - free): the allocator's tensors and reserve, the CUDA context,
    NCCL's buffers and other processes. What runs out at an OOM; ``peak_gib`` is the tensors' part."""

    @property
    def used_gib(self) -> float | None:
        """What a gauge shows: the card's used memory on GPU (peak tensors from an older trainer),
        resident memory on CPU."""
        for value in (self.device_used_gib, self.peak_gib, self.rss_gib):
            if value is not None:
                return value
        return None


@dataclass(frozen=True)
class MetricRecord:
    """One metrics line. ``kind`` is ``train`` (a step finished), ``eval``, or ``signal_checkpoint`` (the
    trainer saved ``step`` on SIGUSR1 and stopped; ``extra`` names the signal)."""

    step: int
    kind: str = _KIND_TRAIN
    max_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    eval_loss: float | None = None
    eval_exact_match: float | None = None
    router_aux_loss: float | None = None
    """A mixture-of-experts model's router load-balancing loss (mean over the step, before its
    coefficient); ``loss`` stays the language-model loss alone."""
    time: float | None = None
    memory: tuple[RankMemory, ...] = ()
    rank_step_s: tuple[float | None, ...] = ()
    """Seconds each rank (indexed by global rank; its node is rank // ranks per node) worked on a step, as
    opposed to waiting for the others, averaged since the previous record: in an FSDP step every rank waits
    for the slowest, so only this tells a slow rank apart (``trainer.metrics.RankClock``, docs/ranks.md)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Encode as one JSON line (no trailing newline); NaN/inf become null."""
        data = asdict(self)
        extra = data.pop("extra")
        data = {k: _finite(v) for k, v in data.items() if v is not None and v != ()}
        if self.rank_step_s:
            data["rank_step_s"] = [_finite(v) for v in self.rank_step_s]
        if self.memory:
            data["memory"] = [
                {k: v for k, v in asdict(m).items() if v is not None} for m in self.memory
            ]
        data.update(extra)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> MetricRecord | None:
        """Decode one line; ``None`` for anything that is not a metrics record."""
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("step"), int):
            return None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricRecord:
        known = {f for f in cls.__dataclass_fields__ if f not in ("memory", "rank_step_s", "extra")}
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key in known:
                kwargs[key] = value
            elif key not in ("memory", "rank_step_s"):
                extra[key] = value
        memory = tuple(
            RankMemory(**{k: v for k, v in m.items() if k in RankMemory.__dataclass_fields__})
            for m in data.get("memory") or ()
            if isinstance(m, dict) and isinstance(m.get("rank"), int)
        )
        return cls(**kwargs, memory=memory, rank_step_s=_seconds(data.get("rank_step_s")), extra=extra)


@dataclass(frozen=True)
class DataSummary:
    """What the run trains on, said once at start (a ``data`` record at step 0): how many examples, and
    how many of them were cut at ``max_seq_len`` with how many tokens lost (``fsdp-tui show``)."""

    examples: int
    eval_examples: int
    format: str
    max_seq_len: int
    truncated: int
    """Training examples longer than ``max_seq_len``, cut to it."""
    truncated_tokens: int
    """Tokens those examples lost."""

    def record(self) -> MetricRecord:
        return MetricRecord(step=0, kind=KIND_DATA, extra=asdict(self))

    @classmethod
    def from_record(cls, record: MetricRecord) -> DataSummary | None:
        """The summary a ``data`` record carries; ``None`` for any other record or a malformed one."""
        if record.kind != KIND_DATA:
            return None
        values = {k: record.extra.get(k) for k in cls.__dataclass_fields__}
        counts = [k for k in values if k != "format"]
        if any(not isinstance(values[k], int) or isinstance(values[k], bool) or values[k] < 0 for k in counts) \
                or not isinstance(values["format"], str) or not values["format"].isidentifier() \
                or len(values["format"]) > 20:
            return None
        return cls(**values)

    def words(self) -> str:
        """``1200 examples (alpaca), 37 cut at max_seq_len 512 (5,120 tokens lost)``."""
        cut = (f"{self.truncated} cut at max_seq_len {self.max_seq_len} ({self.truncated_tokens:,} tokens lost)"
               if self.truncated else f"none cut at max_seq_len {self.max_seq_len}")
        held = f" + {self.eval_examples} held out" if self.eval_examples else ""
        return f"{self.examples} examples{held} ({self.format}), {cut}"


def _seconds(value: Any) -> tuple[float | None, ...]:
    """Per-rank seconds as sent: a list of numbers (``null`` for a rank that did not say); anything
    else is dropped rather than trusted."""
    if not isinstance(value, list):
        return ()
    return tuple(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                 and v >= 0 else None for v in value)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
