"""A swap: one failed node replaced by the run's owner (a spare, a node SLURM picked once the failed one was
excluded, or nothing: the run went on without it), as the run's record keeps it (``swaps.json``) and the
``NodeSwapped`` event carries it; encoded by :meth:`Swap.to_dict`, decoded once by :meth:`Swap.from_wire`.

Each swap says which node failed and why, what took its place, the checkpoint the nodes resumed from, and once
the first step after it came: how long the run stood still, how many steps it lost, and the trainer's resume
check (``verified``: it continued exactly where it stopped; ``resharded`` after a shrink). The owner's record
of swaps is :mod:`launcher.runs.core.swaps`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from launcher.untrusted import sanitize_line
from launcher.words import node_at

SwapKind = Literal["spare", "exclude", "shrink"]


@dataclass(frozen=True)
class Swap:
    """One replacement of a failed node, from the failure to the first step after it."""

    number: int
    """1 for the run's first swap, and so on."""
    kind: SwapKind
    node_rank: int
    """The failed node's rank (a spare takes the same rank; after a shrink the nodes after it move up)."""
    failed_host: str
    why: str
    """The triage's words (``node 1 (gpu-07): lost: no connection for 120 s``)."""
    signature: str
    """``lost``, ``killed``, ``gpu_lost``, ``node_fail``: what named the node."""
    failed_at: float
    """When the failure was seen (the node's job ended, its link went down, its GPU vanished)."""
    attempt: int
    """The attempt that runs on the new nodes."""
    failed_step: int | None = None
    """The newest training step recorded before the failure."""
    replacement: str = ""
    """The spare's host, SLURM's words for the node it picks, or empty after a shrink."""
    skipped: tuple[str, ...] = ()
    """Spares passed over, each with why (``gpu-12: doctor: gpus: nvidia-smi failed ...``)."""
    checkpoint_step: int | None = None
    """The step of the whole checkpoint the nodes resume from (``None``: from the start)."""
    checkpoint_note: str = ""
    """Where that checkpoint came from, or why a newer one could not be used."""
    batch: str = ""
    """A shrink's batch change (``per_device_batch_size 4 -> 3, ...``)."""
    resumed_at: float | None = None
    """When the first training step after the swap was recorded."""
    resumed_step: int | None = None
    verdict: str | None = None
    """The trainer's resume check: ``verified``, ``resharded``, ``differs``, ``unchecked``; ``none`` when
    the run started again from step 0 (nothing to check)."""
    differs: tuple[str, ...] = ()
    loss_note: str = ""
    """Why a loss jump the resume check flagged is the run's own: the first step after the swap gave the
    loss that step gave before the failure."""
    hosts_after: tuple[str, ...] = ()
    """The run's nodes after the swap, by rank."""
    log_shift: dict[int, int] = field(default_factory=dict)
    """Per rank, the bytes of the record's node log before this node set's logs (a new node's log starts at
    0 where the record's copy already holds the failed node's)."""
    stream_shift: dict[str, int] = field(default_factory=dict)
    """The same for node 0's metrics and samples, by the record's file name, once another node is node 0."""

    @property
    def settled(self) -> bool:
        """The first step after the swap came (and with it the resume check, when there was a checkpoint)."""
        return self.resumed_at is not None and self.verdict is not None

    @property
    def recovered(self) -> bool:
        """The resume proved itself: ``verified`` (``resharded`` after a shrink), or a start from step 0."""
        return self.verdict in ("verified", "resharded", "none")

    @property
    def state_word(self) -> str:
        """How the swap stands, first in a state line: ``recovering`` (no step yet), ``recovered`` (proved),
        ``went on unchecked`` (nothing could prove it), ``swap NOT verified`` (the resume differs)."""
        if not self.settled:
            return "recovering"
        if self.recovered:
            return "recovered"
        return "went on unchecked" if self.verdict == "unchecked" else "swap NOT verified"

    @property
    def seconds(self) -> float | None:
        """From the failure to the first step after it."""
        return None if self.resumed_at is None else max(0.0, self.resumed_at - self.failed_at)

    @property
    def steps_lost(self) -> int | None:
        """Steps trained before the failure that were trained again (from the checkpoint's step on)."""
        if self.failed_step is None:
            return None
        return max(0, self.failed_step - (self.checkpoint_step or 0))

    def _what(self) -> str:
        what = {"lost": "lost", "killed": "killed", "gpu_lost": "lost its GPU", "node_fail": "failed"}.get(
            self.signature, "failed")
        return what + (f" at step {self.failed_step:,}" if self.failed_step is not None else "")

    def failure_words(self) -> str:
        """``node 3 (gpu-07) lost at step 1,840``."""
        return f"{node_at(self.node_rank, self.failed_host)} {self._what()}"

    def replaced_words(self) -> str:
        """What the node that took the failed one's place stands in for: ``replaced gpu-07 (lost at step 1,840)``."""
        return f"replaced {self.failed_host} ({self._what()})"

    def words(self) -> str:
        """One line: ``node 3 (gpu-07) lost at step 1,840; replaced by gpu-11; resumed verified at step 1,800
        after 94 s``."""
        parts = [self.failure_words()]
        if self.kind == "spare":
            parts.append(f"replaced by {self.replacement}")
        elif self.kind == "exclude":
            parts.append(f"excluded, {self.replacement}" if self.replacement else "excluded")
        else:
            excluded = f"{self.replacement}, " if self.replacement else ""
            parts.append(f"{excluded}the run went on without it" + (f" ({self.batch})" if self.batch else ""))
        if self.settled:
            if self.verdict == "none":
                parts.append(f"started again from step 0, first step after {self.seconds:.0f} s")
            elif self.verdict == "unchecked" and self.checkpoint_step is None:
                parts.append(f"went on, first step after {self.seconds:.0f} s (the workload's own resume, "
                             "not checked)")
            else:
                step = self.checkpoint_step if self.checkpoint_step is not None else self.resumed_step
                parts.append(f"resumed {self.verdict} at step {step:,} after {self.seconds:.0f} s")
                if self.differs:
                    parts.append("differs: " + "; ".join(self.differs))
                if self.loss_note:
                    parts.append(self.loss_note)
        elif self.checkpoint_step is not None:
            parts.append(f"resuming from step {self.checkpoint_step:,}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        data["log_shift"] = {str(k): v for k, v in self.log_shift.items()}
        data.update(seconds=self.seconds, steps_lost=self.steps_lost, recovered=self.recovered, text=self.words())
        return data

    @classmethod
    def from_wire(cls, data: object) -> Swap | None:
        """A swap as ``swaps.json`` keeps it, decoded once; ``None`` for what is not one."""
        if not isinstance(data, dict):
            return None

        def num(key: str) -> int | None:
            v = data.get(key)
            return v if type(v) is int else None

        def real(key: str) -> float | None:
            v = data.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        def text(key: str) -> str:
            v = data.get(key)
            return sanitize_line(v) if isinstance(v, str) else ""

        def texts(key: str) -> tuple[str, ...]:
            v = data.get(key)
            return tuple(sanitize_line(x) for x in v if isinstance(x, str)) if isinstance(v, list) else ()

        kind, rank, number, at, attempt = text("kind"), num("node_rank"), num("number"), real("failed_at"), num("attempt")
        if kind not in ("spare", "exclude", "shrink") or None in (rank, number, at, attempt):
            return None
        shift = data.get("log_shift")
        shifts = {int(k): v for k, v in shift.items() if str(k).isdigit() and type(v) is int} \
            if isinstance(shift, dict) else {}
        stream = data.get("stream_shift")
        streams = {str(k): v for k, v in stream.items() if k in ("metrics.jsonl", "samples.jsonl") and type(v) is int} \
            if isinstance(stream, dict) else {}
        return cls(number, kind, rank, text("failed_host"), text("why"), text("signature"), at, attempt,  # type: ignore[arg-type]
                   num("failed_step"), text("replacement"), texts("skipped"), num("checkpoint_step"),
                   text("checkpoint_note"), text("batch"), real("resumed_at"), num("resumed_step"),
                   text("verdict") or None, texts("differs"), text("loss_note"), texts("hosts_after"), shifts,
                   streams)
