"""Where a run's files are, for the question before it is deleted, and where they stay once its record is
forgotten, with the command that removes each."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.api.run_files import Left, LeftBehind

HERE_HOLDS = "checkpoints, exports, outputs"
"""What the run's folder on this machine holds, said beside its size."""


def folder_line(left: Left) -> str:
    """One folder of the run: its folder here with its size, or a node's run directory."""
    if left.rank is None:
        return f"{left.where}: {left.path} ({left.size}: {HERE_HOLDS})"
    return f"{left.where}: {left.path}"


def left_behind_line(stays: LeftBehind) -> str:
    """One folder that stays once the record is forgotten, and the command that removes it then."""
    left = stays.left
    if left.rank is None:
        return f"its files here stay: {left.path} ({left.size}: {HERE_HOLDS}); remove them: {stays.removal}"
    return f"its files on {left.where} stay there: {left.path}; remove them: {stays.removal}"
