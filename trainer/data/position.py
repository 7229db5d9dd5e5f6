"""Where a run stands in its data: the part of the training state the data's order reads and moves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DataPosition:
    """The epoch and the global micro-batches of it consumed, counted in global micro-batches of
    ``per_global`` rows (a resume on another world size or batch rescales them: :meth:`GlobalOrder.fit`),
    and for a stream where it stands (:class:`trainer.data.stream.StreamOrder`)."""

    epoch: int = 0
    position: int = 0
    """Global micro-batches of the epoch consumed."""
    per_global: int = 0
    """Rows of every rank in one global micro-batch, when ``position`` was counted."""
    stream_rows: int = 0
    """A stream's rows taken, from its start."""
    stream: str | None = None
    """A stream's position in each source (JSON, ``""`` before the first step); ``None``: not a stream."""
