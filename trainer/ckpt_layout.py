"""The checkpoint layout, stdlib only: used by the trainer, the launcher and the node agent.

``<output_dir>/checkpoints/step-00000100/`` holds DCP's shard files, its ``.metadata`` (written last
by DCP) and our ``meta.json`` (written after that). A folder is complete iff both exist and
``meta.json`` parses; a save never reuses a folder (``step-00000100-1`` when the name is taken), and
the newest complete checkpoint is never deleted.

Listing never follows a link: an entry that is a symbolic link (``step-00000006 -> /``) is listed as a link,
never complete (so never resumable, never "the newest"), with no size, and nothing behind it is walked.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import asdict, dataclass

META = "meta.json"
DCP_META = ".metadata"
CHECKPOINTS_DIR = "checkpoints"
PREFIX = "step-"


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: str
    complete: bool
    size_bytes: int
    mtime: float
    link: bool = False
    """The entry is a symbolic link, not a folder: shown as such, never followed, never resumed from."""
    adapter: bool = False
    """A LoRA run's checkpoint: the adapters (and ``modules_to_save``) only, the base read from the model."""

    @property
    def kind(self) -> str:
        """``adapter`` or ``full``, as listings show it."""
        return "adapter" if self.adapter else "full"

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def to_dict(self) -> dict:
        return asdict(self)


def step_name(step: int, n: int = 0) -> str:
    """``step-00000100`` (``step-00000100-2`` for the second try of a taken name)."""
    return f"{PREFIX}{step:08d}" + (f"-{n}" if n else "")


def step_of_name(name: str) -> int | None:
    """The step a folder name says, or ``None`` for a folder that is not a checkpoint."""
    digits = name[len(PREFIX):].split("-")[0] if name.startswith(PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def is_complete(path: str) -> bool:
    return os.path.isfile(os.path.join(path, DCP_META)) and os.path.isfile(os.path.join(path, META))


_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def expand_path(path: str, env: dict) -> str:
    """``$NAME``/``${NAME}`` from ``env`` (unknown names stay as written), then ``~``: how a node's job
    sees its ``output_dir`` (the trainer expands it in the job's environment)."""
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return env.get(name, match.group(0))

    return os.path.expanduser(_VAR.sub(value, path))


def checkpoints_root(output_dir: str) -> str:
    return os.path.join(os.path.expanduser(output_dir), CHECKPOINTS_DIR)


def list_checkpoints(root: str) -> list[CheckpointInfo]:
    """Every ``step-*`` folder under ``root``, oldest first, with its size and newest file time."""
    out = []
    try:
        names = os.listdir(root)
    except OSError:
        return out
    for name in names:
        path = os.path.join(root, name)
        step = step_of_name(name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if step is None or not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            continue
        if stat.S_ISLNK(st.st_mode):
            out.append(CheckpointInfo(step, path, False, 0, st.st_mtime, link=True))
            continue
        complete, adapter = is_complete(path), False
        if complete:
            try:
                with open(os.path.join(path, META), encoding="utf-8") as f:
                    meta = json.load(f)
                step, adapter = int(meta.get("step", step)), "lora" in meta
            except (OSError, ValueError, TypeError, AttributeError):
                complete = False
        size, mtime = _size_and_mtime(path)
        out.append(CheckpointInfo(step, path, complete, size, mtime, adapter=adapter))
    return sorted(out, key=lambda c: (c.step, c.name))


def _size_and_mtime(path: str) -> tuple[int, float]:
    """Files under ``path`` by ``lstat``: a link inside a checkpoint counts as itself, not as its target."""
    size, mtime = 0, os.lstat(path).st_mtime
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            size += st.st_size
            mtime = max(mtime, st.st_mtime)
    return size, mtime


def written_by(path: str) -> str | None:
    """The run id a checkpoint's ``meta.json`` records (``None``: not recorded, or unreadable)."""
    try:
        with open(os.path.join(path, META), encoding="utf-8") as f:
            run_id = json.load(f).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return run_id if isinstance(run_id, str) else None


def newest_complete(ckpts: list[CheckpointInfo]) -> CheckpointInfo | None:
    done = [c for c in ckpts if c.complete]
    return done[-1] if done else None


def deletable(ckpts: list[CheckpointInfo], target: CheckpointInfo) -> bool:
    """Every checkpoint may go except the newest complete one."""
    newest = newest_complete(ckpts)
    return newest is None or target.path != newest.path


def to_prune(ckpts: list[CheckpointInfo], keep_last: int) -> list[CheckpointInfo]:
    """Complete checkpoints beyond the newest ``keep_last`` (never the newest complete one)."""
    done = [c for c in ckpts if c.complete]
    old = done[: max(0, len(done) - max(keep_last, 1))]
    return [c for c in old if deletable(ckpts, c)]
