"""The training state a checkpoint keeps besides the weights: the step, the run's length and where the
run stands in its data.

It is saved through DCP as the ``trainer`` entry of the application state
(:class:`trainer.ckpt.checkpoint.AppState`), one value per key, under the keys every checkpoint has had
since the trainer first wrote one (``step``, ``epoch``, ``position``, ``per_global``, ``total_steps``, and a
stream's ``stream_rows`` and ``stream``): a checkpoint in a user's folder loads into this type, and one
this type writes is read as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch.distributed.checkpoint.stateful import Stateful

from trainer.data.position import DataPosition


@dataclass
class TrainState(Stateful):
    """The step counter and the data's position (DCP's ``Stateful``: ``state_dict`` / ``load_state_dict``)."""

    step: int = 0
    """Optimiser steps done."""
    total_steps: int = 0
    """Optimiser steps of the whole run, as of the last save (a resume on another world size rescales
    ``step`` by it: :meth:`trainer.ckpt.run.Checkpoints.resume`)."""
    data: DataPosition = field(default_factory=DataPosition)

    @classmethod
    def start(cls, total_steps: int, per_global: int, streamed: bool) -> TrainState:
        """A new run's state: step 0 of ``total_steps``, at the start of its data."""
        return cls(0, total_steps, DataPosition(per_global=per_global, stream="" if streamed else None))

    def state_dict(self) -> dict[str, Any]:
        data = self.data
        saved: dict[str, Any] = {"step": self.step, "epoch": data.epoch, "position": data.position,
                                 "per_global": data.per_global, "total_steps": self.total_steps}
        if data.stream is not None:  # where the stream stands: rows taken, and its position in each source
            saved.update(stream_rows=data.stream_rows, stream=data.stream)
        return saved

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A checkpoint's values (as :meth:`state_dict` named them); a key it lacks keeps this run's value."""
        data = self.data
        self.step = int(state_dict.get("step", self.step))
        self.total_steps = int(state_dict.get("total_steps", self.total_steps))
        data.epoch = int(state_dict.get("epoch", data.epoch))
        data.position = int(state_dict.get("position", data.position))
        data.per_global = int(state_dict.get("per_global", data.per_global))
        if data.stream is not None:
            data.stream_rows = int(state_dict.get("stream_rows") or 0)
            data.stream = str(state_dict.get("stream") or "")
