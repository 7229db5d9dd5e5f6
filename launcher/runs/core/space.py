"""Room on the operator's disk for the run's record. A run's owner writes every byte its nodes log into
the data dir; when that disk fills, SQLite and the mirrors fail mid-write and the cause is lost with them.
So the owner stops the job while some room is left (the floor), and a write that fails anyway is named
as what it is (no space, a disk error, a read-only disk), never as the job's failure."""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from pathlib import Path

from launcher.words import fmt_bytes

FLOOR_ENV = "FSDP_TUI_MIN_FREE_MB"
"""The floor in MiB, when the default (64 MiB, or an eighth of a smaller disk) does not suit."""
FLOOR_MAX = 64 << 20
END_WAIT_ENV = "FSDP_TUI_END_WAIT_S"
"""How long a run's owner waits for room to write the run's end, when the default does not suit."""
END_WAIT_S = 900.0
"""A run's owner keeps its end in memory this long, writing it as soon as the disk takes it; then it gives
up, says so where a full disk cannot refuse it (its lock's note), and leaves the run to the next command
that finds room (which catches the run up from its nodes and records its end)."""
CHECK_EVERY_S = 0.5
CHECK_EVERY_BYTES = 256 << 10
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
_SQLITE_WRITE_WORDS = ("disk is full", "disk i/o error", "readonly database", "read-only")


class RecordUnwritable(Exception):
    """The run's record cannot be written (or is about to be unable to): the run must stop.
    ``str()`` names the path, the free space and what to do."""


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def floor_bytes(path: Path) -> int:
    """How much room the owner keeps free on ``path``'s disk for the record's last writes."""
    wanted = os.environ.get(FLOOR_ENV)
    if wanted:
        try:
            return int(float(wanted) * (1 << 20))
        except ValueError:
            pass
    st = os.statvfs(path)
    return min(FLOOR_MAX, st.f_blocks * st.f_frsize // 8)


def shortage(path: Path, need: int = 0) -> str | None:
    """Why ``path``'s disk has too little room for a run's record (and ``need`` more bytes), or ``None``."""
    free, floor = free_bytes(path), floor_bytes(path)
    if free - need >= floor:
        return None
    return (f"no space left on device for the run's record: {path} has {fmt_bytes(free)} free, below the "
            f"{fmt_bytes(floor)} kept free there; free some space on that disk (or point "
            f"FSDP_TUI_HOME at a larger one)")


def is_write_failure(err: BaseException) -> bool:
    """A write the disk refused (full, failing, read-only), as opposed to a bug."""
    if isinstance(err, OSError):
        return err.errno in WRITE_ERRNOS
    if isinstance(err, sqlite3.OperationalError):
        text = str(err).lower()
        return any(words in text for words in _SQLITE_WRITE_WORDS)
    return False


def write_failure(path: Path, err: BaseException) -> str:
    """The words for a refused write: the disk's state and the error."""
    try:
        free = f"{fmt_bytes(free_bytes(path))} free"
    except OSError:
        free = "free space unknown"
    reason = (os.strerror(err.errno) if isinstance(err, OSError) and err.errno else str(err))
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT) or "full" in reason.lower():
        return (f"no space left on device for the run's record: {path} has {free} ({reason}); free some space "
                "on that disk")
    return f"the run's record cannot be written in {path} ({reason}, {free}); the run was stopped"


class SpaceWatch:
    """Checks the floor often enough to stop in time, rarely enough to cost nothing (a ``statvfs``
    at most every ``CHECK_EVERY_S`` or ``CHECK_EVERY_BYTES`` written)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.last = -float("inf")
        self.written = 0

    def check(self, more_bytes: int = 0) -> str | None:
        self.written += more_bytes
        now = time.monotonic()
        if now - self.last < CHECK_EVERY_S and self.written < CHECK_EVERY_BYTES:
            return None
        self.last, self.written = now, 0
        try:
            return shortage(self.path, more_bytes)
        except OSError:
            return None


def end_wait_s() -> float:
    """:data:`END_WAIT_S`, or ``$FSDP_TUI_END_WAIT_S``."""
    try:
        return max(0.0, float(os.environ.get(END_WAIT_ENV, END_WAIT_S)))
    except ValueError:
        return END_WAIT_S
