"""Processes the tests find and signal: those of a network namespace (a test host, a SLURM node), and a
signal sent to pids that may have ended meanwhile."""

from __future__ import annotations

import os
import signal
import subprocess


def namespace_pids(namespace: str) -> list[int]:
    """Every process running in the network namespace ``namespace`` now."""
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def send(pids: list[int], how: int = signal.SIGKILL) -> list[int]:
    """``how`` (SIGKILL) to each of ``pids``; the pids it reached (one that ended meanwhile is passed over)."""
    reached = []
    for pid in pids:
        try:
            os.kill(pid, how)
        except ProcessLookupError:
            continue
        reached.append(pid)
    return reached
