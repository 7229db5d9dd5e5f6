"""What a run's data hands the loop: the training and evaluation rows, how they were made, and a
mixture's sources; rows of several sources side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trainer.data.mixture import Mix
from trainer.data.token_rows import TokenRows
from trainer.wire.config import TrainerConfig
from trainer.wire.protocol import DataSummary


@dataclass
class RunData:
    train_rows: Any
    """The rows by id: :class:`trainer.data.token_rows.TokenRows`, :class:`MixedRows`, or a stream's
    :class:`trainer.data.stream.StreamRows`."""
    eval_rows: Sequence[dict[str, torch.Tensor]]
    pad_id: int
    fmt: str
    summary: DataSummary
    notes: tuple[str, ...] = ()
    """Lines for the start of the run (where the tokens came from, a chat template that is not the
    tokenizer's own, how evaluation is bounded)."""
    mix: Mix | None = None
    """A mixture's sources and shares (``None``: one source)."""
    template: str | None = None
    """The chat template chat data is rendered with."""
    stream: Any = None
    """Streaming: the :class:`trainer.data.stream.StreamRows` the rows come from (``None``: the cache)."""

    def learned_counts(self) -> Any:
        """Each training row's learned tokens, as the loss counts them, by row id."""
        if self.stream is not None:
            from trainer.data.stream import StreamLearned

            return StreamLearned(self.stream)
        rows = self.train_rows
        assert isinstance(rows, (TokenRows, MixedRows))
        return rows.learned_counts().tolist()


class MixedRows(Sequence):
    """A mixture's training rows: each source's rows one after another (a row id is its source's
    offset plus its row there)."""

    def __init__(self, parts: list[TokenRows]) -> None:
        self.parts = parts
        self.offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = int(index) + (len(self) if index < 0 else 0)
        source = int(np.searchsorted(self.offsets, index, side="right")) - 1
        return self.parts[source][index - int(self.offsets[source])]

    def learned_counts(self) -> np.ndarray:
        return np.concatenate([p.learned_counts() for p in self.parts])


def eval_note(cfg: TrainerConfig, rows: int) -> str:
    """How evaluation is bounded, said at the start of the run."""
    if not rows:
        return "evaluation: no held-out rows (data.eval_fraction is 0 and there is no data.eval_split)"
    held = f"{rows:,} held-out rows"
    if cfg.data.eval_max_rows is not None:
        held += f" (at most data.eval_max_rows: {cfg.data.eval_max_rows:,})"
    seconds = (f"each evaluation at most {cfg.logging.eval_max_s:g} s (logging.eval_max_s)"
               if cfg.logging.eval_max_s is not None else "each evaluation unbounded in time")
    return f"evaluation: {held}, {seconds}"
