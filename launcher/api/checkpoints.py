"""A run's checkpoints where their whole copies are (node 0's folder, another node's, this machine's, or a
bucket): listed, deleted, exported as a Hugging Face folder. A node that is gone says so in the listing's
``error``; it is never "no checkpoints". A listing knows whose each checkpoint is (:class:`RunCheckpoints`):
the run's own, the ones it continued, and the folder's others; only the run's own are its to delete or
export."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from launcher.api._lazy import lazy_names

if TYPE_CHECKING:
    from launcher.backends.base import CheckpointListing, ExportResult
    from launcher.runs.core.checkpoints import (
        BytesChecked,
        CheckpointError,
        CheckpointInfo,
        NoOutputDir,
        RunCheckpoints,
    )

__getattr__ = lazy_names(__name__, {
    "launcher.backends.base": ("CheckpointListing", "ExportResult"),
    "launcher.runs.core.checkpoints": ("BytesChecked", "CheckpointError", "CheckpointInfo", "NoOutputDir",
                                       "RunCheckpoints"),
})

__all__ = ["BytesChecked", "CheckpointError", "CheckpointInfo", "CheckpointListing", "Checkpoints", "ExportResult", "NoOutputDir",
           "RunCheckpoints"]


class Checkpoints:
    """The checkpoints of one data dir's runs. Every call asks the node (or bucket) that holds them: each
    is bounded, and returns once that holder answered."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)

    async def delete(self, run_id: str, name: str) -> None:
        """Delete the run's own checkpoint folder ``name`` where it is held; :class:`CheckpointError` when it
        may not be deleted (another run's, the run's newest complete one) or cannot be."""
        from launcher.runs.core.checkpoints import delete_checkpoint

        await delete_checkpoint(self.home, run_id, name)

    async def export(self, run_id: str, name: str, copy_to: Path | None = None, *,
                     merged: bool = False) -> ExportResult:
        """A Hugging Face folder of checkpoint ``name``, written where torch is (the node that holds it) and,
        with ``copy_to`` (a new folder), copied here; a LoRA checkpoint's adapter in PEFT's format, and with
        ``merged`` the merged model too; its bytes are checked against the trainer's digests first.
        :class:`CheckpointError` says why not (another run's checkpoint among them)."""
        from launcher.runs.core.checkpoints import export_checkpoint

        return await export_checkpoint(self.home, run_id, name, copy_to, merged=merged)

    async def verify(self, run_id: str) -> list[BytesChecked]:
        """Every whole checkpoint the run lists, read back where it lies and checked against the digests
        the trainer wrote; one that differs is marked there and not whole from then on (reads every byte).
        :class:`CheckpointError` when the holder cannot be asked."""
        from launcher.runs.core.checkpoints import verify_checkpoints

        return await verify_checkpoints(self.home, run_id)

    # Last in the class: inside its body ``list`` names this method, not the builtin.
    async def list(self, run_id: str) -> RunCheckpoints:
        """The run's checkpoints, oldest step first, each complete or not, with its kind, size, age and
        whose it is (``checkpoints``: its own and the ones it continued; ``others``: the folder's others).
        :class:`NoOutputDir`: the run keeps none (no ``output_dir``); a holder that cannot be asked fills
        ``error``."""
        from launcher.runs.core.checkpoints import list_checkpoints

        return await list_checkpoints(self.home, run_id)
