"""The metrics wire format between rank 0 of a job and the launcher.

Stdlib only: the launcher (no torch) decodes what the trainer (or a user script through
:mod:`trainer.wire.reporter`) writes. One JSON object per line in ``FSDP_TUI_METRICS_FILE``.
Unknown keys are kept in ``extra`` so newer trainers never break older launchers.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.wire.json_value import JsonValue

METRICS_FILE_ENV = "FSDP_TUI_METRICS_FILE"
RUN_ID_ENV = "FSDP_TUI_RUN_ID"
CHECKPOINT_SIGNAL_ENV = "FSDP_TUI_CHECKPOINT_ON_SIGNAL"
"""Set to ``1`` by a backend that sends SIGUSR1 to the trainer's worker processes when the job's time is
nearly up: the built-in trainer then saves a checkpoint at the next step boundary and exits 0."""

_KIND_TRAIN = "train"
_KIND_EVAL = "eval"
_KIND_SIGNAL_CHECKPOINT = "signal_checkpoint"
KIND_DATA = "data"
KIND_RESUME_CHECK = "resume_check"


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
    peak_rss_gib: float | None = None
    """On CPU: the process's peak resident memory so far (``VmHWM``), what its memory prediction is
    compared with (``peak_gib`` is a GPU's)."""

    @property
    def measured_peak_gib(self) -> float | None:
        """The rank's peak so far, as its prediction counts it: the tensors' on a GPU, the process's on CPU."""
        return self.peak_gib if self.peak_gib is not None else self.peak_rss_gib

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
    for the slowest, so only this tells a slow rank apart (``trainer.loop.metrics.RankClock``, docs/ranks.md)."""
    extra: dict[str, JsonValue] = field(default_factory=dict)
    """Keys this vocabulary does not know (a newer trainer's), JSON as they came: kept and written back."""

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
        extra: dict[str, JsonValue] = {}
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
class SourceSummary:
    """One source of a mixture: what it holds and its share of the rows trained on."""

    name: str
    format: str
    examples: int
    rows: int
    """Training rows (packed sequences when packing)."""
    share: float
    """Its share of the rows of every step, by its weight (or epochs and size)."""

    @classmethod
    def from_wire(cls, value: Any) -> SourceSummary | None:
        """One decoded entry of a ``data`` record (untrusted: ``None`` for anything malformed)."""
        if not isinstance(value, dict):
            return None
        name, fmt, share = value.get("name"), value.get("format"), value.get("share")
        counts = [value.get(k) for k in ("examples", "rows")]
        if not isinstance(name, str) or not name or not isinstance(fmt, str) or not fmt.isidentifier() \
                or any(not _count(c) for c in counts) or not _number(share) or not 0 <= share <= 1:
            return None
        return cls(_clean(name)[:80], fmt[:20], counts[0], counts[1], float(share))


@dataclass(frozen=True)
class DataSummary:
    """What the run trains on, said once at start (a ``data`` record at step 0): how many examples, and
    how many of them were cut at ``max_seq_len`` with how many tokens lost (``fsdp-tui show``); for a
    mixture, each source and its share."""

    examples: int
    eval_examples: int
    format: str
    max_seq_len: int
    truncated: int
    """Training examples longer than ``max_seq_len``, cut to it."""
    truncated_tokens: int
    """Tokens those examples lost."""
    sources: tuple[SourceSummary, ...] = ()
    """A mixture's sources, in the order of a train record's ``mix_rows`` (empty: one source)."""
    streamed: bool = False
    """The rows are read as they are trained on (``examples`` counts none ahead)."""

    def record(self) -> MetricRecord:
        extra = asdict(self)
        extra["sources"] = [asdict(s) for s in self.sources]
        return MetricRecord(step=0, kind=KIND_DATA, extra=extra)

    @classmethod
    def from_record(cls, record: MetricRecord) -> DataSummary | None:
        """The summary a ``data`` record carries; ``None`` for any other record or a malformed one."""
        if record.kind != KIND_DATA:
            return None
        names = [k for k in cls.__dataclass_fields__ if k not in ("sources", "streamed")]
        values = {k: record.extra.get(k) for k in names}
        counts = [k for k in values if k != "format"]
        if any(not _count(values[k]) for k in counts) \
                or not isinstance(values["format"], str) or not values["format"].isidentifier() \
                or len(values["format"]) > 20:
            return None
        raw = record.extra.get("sources")
        sources = tuple(s for s in (SourceSummary.from_wire(v) for v in raw[:64]) if s is not None) \
            if isinstance(raw, list) else ()
        return cls(**values, sources=sources, streamed=record.extra.get("streamed") is True)

    def words(self) -> str:
        """``1200 examples (alpaca), 37 cut at max_seq_len 512 (5,120 tokens lost)``."""
        cut = (f"{self.truncated} cut at max_seq_len {self.max_seq_len} ({self.truncated_tokens:,} tokens lost)"
               if self.truncated else f"none cut at max_seq_len {self.max_seq_len}")
        held = f" + {self.eval_examples} held out" if self.eval_examples else ""
        if self.streamed:
            return f"streamed ({self.format}){held.replace(' + ', '; ')}"
        return f"{self.examples} examples{held} ({self.format}), {cut}"


MIX_ROWS = "mix_rows"
"""A train record's rows taken from each source of a mixture so far (a list, in the ``data`` record's
order of ``sources``)."""


def mix_rows(record: MetricRecord) -> tuple[int, ...]:
    """The rows each source of a mixture gave up to this train record (empty: not a mixture's)."""
    value = record.extra.get(MIX_ROWS)
    if not isinstance(value, list) or len(value) > 64 or not all(_count(v) for v in value):
        return ()
    return tuple(value)


def mix_words(sources: tuple[SourceSummary, ...], rows: tuple[int, ...]) -> str:
    """``alpaca 74.9% (75%), chat 25.1% (25%)``: each source's realised share of the rows trained on so
    far, and (in brackets) the share its weight asks for."""
    total = sum(rows)
    if not sources or len(rows) != len(sources) or not total:
        return ", ".join(f"{s.name} ({s.share:.0%})" for s in sources)
    return ", ".join(f"{s.name} {n / total:.1%} ({s.share:.0%})" for s, n in zip(sources, rows, strict=True))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


RESUME_VERDICTS = ("verified", "resharded", "differs", "unchecked")
_TEXT_MAX = 400
_ITEMS_MAX = 16


@dataclass(frozen=True)
class ResumeCheck:
    """Whether a resumed run continues what its checkpoint recorded, judged once at its first step (a
    ``resume_check`` record; the rule is :mod:`trainer.ckpt.resume_check`'s). ``verdict``: ``verified`` (all
    it records matches), ``resharded`` (matches, on another world size or sharding), ``differs`` (what
    differs is in ``differs``, in plain words) or ``unchecked`` (the checkpoint recorded nothing to
    compare: an older trainer's)."""

    verdict: str
    step: int
    from_step: int | None = None
    from_run: str | None = None
    world_before: int | None = None
    world_after: int | None = None
    sharding_before: str | None = None
    sharding_after: str | None = None
    differs: tuple[str, ...] = ()
    checked: tuple[str, ...] = ()
    not_checked: tuple[str, ...] = ()

    def record(self) -> MetricRecord:
        extra = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()
                 if k != "step" and v not in (None, ())}
        return MetricRecord(step=self.step, kind=KIND_RESUME_CHECK, extra=extra)

    @classmethod
    def from_record(cls, record: MetricRecord) -> ResumeCheck | None:
        """The check a ``resume_check`` record carries, cleaned (what a node sends is untrusted); ``None``
        for another record or one without a readable verdict. Fields a newer trainer adds are ignored,
        fields an older one lacks are unknown."""
        if record.kind != KIND_RESUME_CHECK:
            return None
        e = record.extra
        verdict = e.get("verdict")
        if not isinstance(verdict, str) or not verdict.isidentifier() or len(verdict) > 20:
            return None

        def count(key: str) -> int | None:
            v = e.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

        def words(key: str) -> tuple[str, ...]:
            v = e.get(key)
            return tuple(_clean(x) for x in v[:_ITEMS_MAX] if isinstance(x, str)) if isinstance(v, list) else ()

        def text(key: str) -> str | None:
            v = e.get(key)
            return _clean(v)[:80] if isinstance(v, str) and v else None

        return cls(verdict=verdict, step=record.step, from_step=count("from_step"), from_run=text("from_run"),
                   world_before=count("world_before"), world_after=count("world_after"),
                   sharding_before=text("sharding_before"), sharding_after=text("sharding_after"),
                   differs=words("differs"), checked=words("checked"), not_checked=words("not_checked"))

    def reshard_words(self) -> str:
        """``2 ranks full_shard -> 1 rank no_shard`` (empty when neither changed)."""
        if (self.world_before, self.sharding_before) == (self.world_after, self.sharding_after):
            return ""

        def side(world: int | None, sharding: str | None) -> str:
            ranks = "? ranks" if world is None else f"{world} rank{'s' if world != 1 else ''}"
            return f"{ranks} {sharding or '?'}"

        return f"{side(self.world_before, self.sharding_before)} -> {side(self.world_after, self.sharding_after)}"

    def words(self) -> str:
        """One line: the verdict, then what differs, or what was checked (and what could not be)."""
        head = self.verdict
        if self.from_step is not None:
            head += f" at step {self.step} (from step {self.from_step}"
            head += f" of run {self.from_run})" if self.from_run else ")"
        if self.verdict == "resharded" and self.reshard_words():
            head += f", {self.reshard_words()}"
        body = "; ".join(self.differs) if self.differs else (
            f"checked {', '.join(self.checked)}" if self.checked else "the checkpoint records nothing to check")
        rest = f"; not checked: {', '.join(self.not_checked)}" if self.not_checked else ""
        return f"{head}: {body}{rest}"


def _clean(text: str) -> str:
    """Printable text of bounded length: what a node sends reaches terminals and MLflow as text only."""
    return "".join(c if c.isprintable() else "?" for c in text[:_TEXT_MAX])


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
