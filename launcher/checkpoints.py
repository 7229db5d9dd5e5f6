"""Checkpoints as the launcher sees them, without torch: ``step-*`` folders, complete iff finalised.

A trainer checkpoint is complete once DCP's ``.metadata`` and our ``meta.json`` both exist.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    complete: bool
    size_bytes: int
    mtime: float

    def to_dict(self) -> dict:
        return {**asdict(self), "path": str(self.path)}


def list_checkpoints(root: Path) -> list[CheckpointInfo]:
    out = []
    if not root.is_dir():
        return out
    for p in root.iterdir():
        digits = p.name[5:].split("-")[0] if p.name.startswith("step-") else ""
        if not (p.is_dir() and digits.isdigit()):
            continue
        complete = (p / ".metadata").is_file() and (p / "meta.json").is_file()
        step = int(digits)
        if complete:
            try:
                step = int(json.loads((p / "meta.json").read_text()).get("step", step))
            except (ValueError, OSError):
                complete = False
        files = [f for f in p.rglob("*") if f.is_file()]
        out.append(CheckpointInfo(step, p, complete, sum(f.stat().st_size for f in files),
                                  max([p.stat().st_mtime] + [f.stat().st_mtime for f in files])))
    return sorted(out, key=lambda c: (c.step, c.path.name))


def deletable(ckpts: list[CheckpointInfo], target: CheckpointInfo) -> bool:
    """Every checkpoint may go except the newest complete one."""
    done = [c for c in ckpts if c.complete]
    return not (done and target.path == done[-1].path)


def checkpoints_of_run(record) -> tuple[Path | None, list[CheckpointInfo]]:
    """The run's ``<output_dir>/checkpoints`` (with ``$FSDP_TUI_RUN_ID`` and ``~`` expanded) and its list."""
    out_dir = record.summary.output_dir
    if not out_dir:
        return None, []
    expanded = os.path.expanduser(out_dir.replace("$FSDP_TUI_RUN_ID", record.summary.run_id)
                                  .replace("${FSDP_TUI_RUN_ID}", record.summary.run_id))
    root = Path(expanded) / "checkpoints"
    return root, list_checkpoints(root)
