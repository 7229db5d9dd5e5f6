"""A node's processes as the agent sees them, standard library only: whether one is alive (a zombie is
not), a process group signalled or asked after, and every process that carries a run's id (and a node's
rank) in its environment, wherever it went (torchrun starts each worker in a session of its own)."""

from __future__ import annotations

import os

RUN_ID_ENV = "FSDP_TUI_RUN_ID"
"""The variable every process of a run's job carries: what finds the processes that left its group."""


def signal_group(pgid: int, sig: int) -> None:
    """``sig`` to the process group ``pgid``, if it still lives (and is ours to signal)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def alive(pid) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def tagged_pids(run_id: str, node_rank=None) -> list:
    """Every process whose environment carries this run's id (setsid'd and double-forked included), and
    this node's rank when given: two nodes of a run may share a machine, and each stops only its own."""
    needles = {f"{RUN_ID_ENV}={run_id}".encode()}
    if node_rank is not None:
        needles.add(f"NODE_RANK={node_rank}".encode())
    pids = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needles <= set(f.read().split(b"\0")):
                    pids.append(int(name))
        except OSError:
            continue
    return pids


def group_alive(pgid: int) -> bool:
    """Whether any process of the group ``pgid`` is left."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def catches(pid: int, signum: int) -> bool:
    """Whether ``pid`` has a handler of its own for ``signum`` (its ``SigCgt`` mask): a process still
    starting has none yet, and a signal whose default is to end it would end it."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        return False
    return False
