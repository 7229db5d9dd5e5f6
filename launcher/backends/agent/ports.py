"""The rendezvous port on node 0, claimed on node 0 itself and held until the job starts.

A port found free and released again is no claim: two launches on the same hosts at the same moment
both find it free, and the second torchrun fails to bind it (or its other nodes join the first run's
store). So a claim here is two things, both held by this agent process and then by the job's supervisor:

- a socket in Linux's abstract namespace named for the port (``@fsdp-tui-rendezvous-29500``): binding it
  is atomic, it is scoped to the network namespace exactly as the TCP port is, any user's launch sees it,
  and the kernel drops it when its holder dies however it dies. Two fsdp-tui runs never hold one port;
- the TCP port itself, bound and listening as torchrun's store binds it, which keeps any other program off
  it from the claim until the job's supervisor closes it, just before it starts the job.

The supervisor keeps the first for the job's life. What is left is the moment between that close and the
job's own bind: a program that is not fsdp-tui may take the port then; the launcher moves the run to
another port once when that happens (``launcher.runs.owner.rendezvous``).
"""

from __future__ import annotations

import socket
import sys
import time

LOCK_NAME = "\0fsdp-tui-rendezvous-{port}"
FIND_TRIES = 64
TAKE_WAIT_S = 2.0
"""How long a start waits for a port it did not hold to come free: the previous attempt's supervisor of
the same run lets go of it as it exits, a moment after its job ended."""


class Claim:
    """A claimed port: its abstract-namespace lock and its listening TCP socket."""

    def __init__(self, port: int, lock, listener) -> None:
        self.port, self.lock, self.listener = port, lock, listener

    def release_listener(self) -> None:
        """Let the job bind the port (the lock stays: no other fsdp-tui run takes it)."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def close(self) -> None:
        self.release_listener()
        if self.lock is not None:
            self.lock.close()
            self.lock = None


_HELD: dict = {}
"""Claims this agent holds, by port, until a job takes one (:func:`take`)."""


def _lock(port: int):
    """The port's fsdp-tui lock, or ``None`` when another fsdp-tui run holds it. Off Linux there is no
    abstract namespace: the TCP bind alone decides there."""
    if not sys.platform.startswith("linux"):
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(LOCK_NAME.format(port=port))
    except OSError:
        s.close()
        return None
    return s


def _listen(port: int):
    """The port bound and listening on every interface, as torchrun's store binds it (SO_REUSEADDR, so a
    port in TIME_WAIT counts as free)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen(1)
    except OSError:
        s.close()
        raise
    return s


def _claim(port: int):
    """``(claim, None)`` or ``(None, why not)``; port 0: one the system picks."""
    try:
        listener = _listen(port)
    except OSError as err:
        return None, err.strerror or str(err)
    port = listener.getsockname()[1]
    lock = _lock(port)
    if lock is None:
        listener.close()
        return None, "another fsdp-tui run on this machine has claimed it"
    return Claim(port, lock or None, listener), None


def claim(port: int) -> dict:
    """Claim ``port`` for a run about to start here (port 0: a free one the system picks), and hold it.
    Taken: ``free`` is false, with why and another port, claimed and held in its place."""
    if port and port in _HELD:
        return {"free": True, "port": port}
    got, why = _claim(port)
    if got is not None:
        _HELD[got.port] = got
        return {"free": True, "port": got.port}
    for _ in range(FIND_TRIES):
        other, _why = _claim(0)
        if other is not None:
            _HELD[other.port] = other
            return {"free": False, "reason": why, "suggest": other.port}
    return {"free": False, "reason": why}


def take(port: int):
    """The claim of ``port`` for the job starting now: the one held since :func:`claim`, else claimed
    now (a retry, or an agent started after a reconnect). ``(claim, None)`` or ``(None, why not)``. Every
    other claim this agent held is let go: the run has chosen."""
    got = _HELD.pop(port, None)
    for other in _HELD.values():
        other.close()
    _HELD.clear()
    if got is not None:
        return got, None
    deadline = time.monotonic() + TAKE_WAIT_S
    while True:
        got, why = _claim(port)
        if got is not None or time.monotonic() > deadline:
            return got, why
        time.sleep(0.05)
