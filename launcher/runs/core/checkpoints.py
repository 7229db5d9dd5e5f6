"""A run's checkpoints, where rank 0 wrote them: listed, deleted and exported through the run's backend
(a node that is gone says so; it is never "no checkpoints")."""

from __future__ import annotations

from pathlib import Path

from launcher.backends.base import Backend, CheckpointListing, ExportResult, NodeError
from launcher.backends.registry import backend_for
from launcher.paths import run_dir
from launcher.runs.core.layout import load_plan
from launcher.runs.core.store import RunStore
from launcher.workload.overrides import SetValue
from trainer.ckpt_layout import CheckpointInfo, deletable, newest_complete

__all__ = ["CheckpointInfo", "deletable", "newest_complete", "list_checkpoints", "delete_checkpoint",
           "export_checkpoint", "NoOutputDir", "CheckpointError", "completeness", "resume_override"]


def completeness(c: CheckpointInfo) -> str:
    """The "complete" column: ``yes``, ``NO``, or ``link`` for an entry that is a symbolic link (never
    followed, never resumed from)."""
    return "link" if c.link else ("yes" if c.complete else "NO")


def resume_override(path: str) -> SetValue:
    """``parameters.checkpoint.resume`` set to ``path`` as data: a folder named ``a #b`` or ``a: b`` is that
    folder, never YAML."""
    return SetValue("parameters.checkpoint.resume", path)


class CheckpointError(RuntimeError):
    """A checkpoint operation failed on the node; the message names the node and why."""


class NoOutputDir(LookupError):
    """The run has no ``parameters.output_dir``: its script keeps its own checkpoints."""


def _backend(home: Path, run_id: str) -> tuple[Backend, str]:
    record = RunStore(home).get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    if not record.summary.output_dir:
        raise NoOutputDir(f"run {run_id} has no parameters.output_dir: its script keeps its own checkpoints")
    return backend_for(load_plan(run_dir(home, run_id))), record.summary.output_dir


async def list_checkpoints(home: Path, run_id: str) -> CheckpointListing:
    backend, output_dir = _backend(home, run_id)
    try:
        return await backend.checkpoints(output_dir)
    finally:
        await backend.close()


async def delete_checkpoint(home: Path, run_id: str, name: str) -> None:
    backend, output_dir = _backend(home, run_id)
    try:
        await backend.delete_checkpoint(output_dir, name)
    except NodeError as err:
        raise CheckpointError(str(err)) from None
    finally:
        await backend.close()


async def export_checkpoint(home: Path, run_id: str, name: str, copy_to: Path | None = None,
                            merged: bool = False) -> ExportResult:
    """A Hugging Face folder written on the node (where torch is); with ``copy_to``, copied here too.
    A LoRA checkpoint exports its adapter in PEFT's format, and with ``merged`` also the merged model."""
    backend, output_dir = _backend(home, run_id)
    try:
        return await backend.export_checkpoint(output_dir, name, str(copy_to) if copy_to else None, merged)
    except NodeError as err:
        raise CheckpointError(str(err)) from None
    finally:
        await backend.close()
