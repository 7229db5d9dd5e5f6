"""SLURM's queue as the launcher sees it, asked sparingly: one ``squeue`` per login node every few seconds,
shared by every run this machine follows there (each run has its own owner process, so the answer is
kept in a file under the data dir, refreshed under a lock by whichever owner finds it stale)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

QUEUE_MIN_S = 3.0
"""At most one ``squeue`` per login node this often, however many runs are followed."""
SQUEUE = ["squeue", "--me", "--noheader", "--states=all", "--format=%i|%T|%r|%S|%N"]
WAITING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                     "SUSPENDED", "STOPPED"})
ACTIVE = frozenset({"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING"})
ENDED_WORDS = {
    "COMPLETED": "completed", "FAILED": "failed (a task exited non-zero)", "CANCELLED": "was cancelled",
    "TIMEOUT": "reached its time limit", "PREEMPTED": "was preempted", "NODE_FAIL": "lost a node (NODE_FAIL)",
    "OUT_OF_MEMORY": "ran out of memory (OUT_OF_MEMORY)", "BOOT_FAIL": "could not boot its nodes (BOOT_FAIL)",
    "DEADLINE": "passed its deadline", "REVOKED": "was revoked",
}


@dataclass(frozen=True)
class QueueEntry:
    job_id: str
    state: str
    """SLURM's long state name (``PENDING``, ``RUNNING``, ``COMPLETED``, ``TIMEOUT``...)."""
    reason: str = ""
    """Why it waits (``Resources``, ``Priority``...), when it does."""
    start: str = ""
    """When it started (or is expected to), as SLURM writes it."""
    nodes: str = ""

    @property
    def waiting(self) -> bool:
        return self.state in WAITING

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def ended(self) -> bool:
        return not self.waiting and not self.active

    def ended_words(self) -> str:
        return ENDED_WORDS.get(self.state, f"ended ({self.state})")


def parse_squeue(text: str) -> dict[str, QueueEntry]:
    """``squeue --format=%i|%T|%r|%S|%N`` lines by job id (array and het jobs keep their full id)."""
    out: dict[str, QueueEntry] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not re.match(r"^\d", parts[0]):
            continue
        parts += [""] * (5 - len(parts))
        reason = "" if parts[2] in ("None", "(null)") else parts[2]
        out[parts[0]] = QueueEntry(parts[0], parts[1].split()[0] if parts[1] else "", reason,
                                   "" if parts[3] in ("N/A", "Unknown") else parts[3], parts[4])
    return out


Ask = Callable[[list[str]], Awaitable[tuple[int | None, str, str]]]
"""Runs a SLURM command on the login node: ``(exit status, stdout, stderr)``."""


class QueueError(RuntimeError):
    pass


class QueueView:
    """The queue of one login node, shared through ``folder/<key>.json`` by every owner process."""

    def __init__(self, key: str, ask: Ask, folder: Path, min_interval_s: float = QUEUE_MIN_S) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.@-]", "_", key) or "local"
        self.path = folder / f"{safe}.json"
        self.ask, self.min_interval_s = ask, min_interval_s

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    async def snapshot(self, *, newer_than: float = 0.0) -> tuple[float, dict[str, QueueEntry]]:
        """``(taken at, entries)`` no older than the interval (and taken after ``newer_than``)."""
        def fresh(data: dict) -> bool:
            taken = data.get("taken_at", 0.0)
            return taken >= newer_than and time.time() - taken < self.min_interval_s

        data = self._read()
        if not fresh(data):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
                data = self._read()  # another owner may have just asked
                if not fresh(data):
                    data = await self._refresh(data)
            finally:
                os.close(fd)
        entries = {k: QueueEntry(**v) for k, v in data.get("jobs", {}).items()}
        return data.get("taken_at", 0.0), entries

    async def _refresh(self, old: dict) -> dict:
        status, stdout, stderr = await self.ask(SQUEUE)
        if status != 0:
            raise QueueError(f"squeue failed on the login node: {(stderr or stdout).strip()[:300]}")
        data = {"taken_at": time.time(), "calls": int(old.get("calls", 0)) + 1,
                "jobs": {k: asdict(v) for k, v in parse_squeue(stdout).items()}}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, self.path)
        return data

    def calls(self) -> int:
        """How many times ``squeue`` was asked through this file (for the scheduler-load benchmark)."""
        return int(self._read().get("calls", 0))
