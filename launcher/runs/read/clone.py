"""A copy of a run's workload to edit and launch again (the app's clone)."""

from __future__ import annotations

from pathlib import Path

from launcher.runs.core.store import RunRecord


def clone_workload(record: RunRecord) -> Path:
    """Write a copy of the run's workload file next to the original (``NAME-clone.yaml``, never over an
    existing file), or of its recorded copy when the original is gone; returns where it went.
    ``OSError`` when that folder cannot be written."""
    if not record.summary.workload_path:
        raise LookupError("this run has no workload file to clone")
    source = Path(record.summary.workload_path)
    target, n = source.with_name(f"{source.stem}-clone.yaml"), 2
    while target.exists():
        target, n = source.with_name(f"{source.stem}-clone{n}.yaml"), n + 1
    text = source.read_text() if source.exists() else (record.directory / "workload.yaml").read_text()
    target.write_text(text if text.endswith("\n") else text + "\n")
    return target
