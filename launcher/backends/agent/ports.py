"""The rendezvous port on node 0, claimed on node 0 itself and held until the job ends.

A port found free and released again is no claim: two launches on the same hosts at the same moment
both find it free, and the second torchrun fails to bind it (or its other nodes join the first run's
store). So a claim here is three sockets, all held by this agent process and then by the job's supervisor:

- a socket in Linux's abstract namespace named for the port (``@fsdp-tui-rendezvous-29500``): binding it
  is atomic, it is scoped to the network namespace exactly as the TCP port is, any user's launch sees it,
  and the kernel drops it when its holder dies however it dies. Two fsdp-tui runs never hold one port;
- the TCP port bound (``SO_REUSEADDR``, IPv6 and IPv4 where the machine has both) and never listening,
  the *hold*: the system never hands a bound port to anyone who asks it for a port (``bind`` to port 0,
  an outgoing connection), while a socket that names the port with ``SO_REUSEADDR``, as torchrun's store
  does, may still bind and listen beside it;
- the TCP port listening, as torchrun's store binds it, which keeps every other program off it from the
  claim until the job's supervisor closes it, just before it starts the job.

The supervisor keeps the lock and the hold for the job's life. So from the claim to the job's end no
program gets the port from the system, however loaded the machine and however long the job takes to
bind it: a port the system picked (a run on this machine alone, a port moved to) is in the range it hands
out to every outgoing connection, and without the hold any of them could take it in the moment between
the listener's close and the job's own bind. What is left is a program that names this very port itself
in that moment: the launcher moves the run to another port once when that happens
(``launcher.runs.owner.rendezvous``).
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
    """A claimed port: its abstract-namespace lock, its bound TCP hold and its listening TCP socket."""

    def __init__(self, port: int, lock, listener, hold=None) -> None:
        self.port, self.lock, self.listener, self.hold = port, lock, listener, hold

    def release_listener(self) -> None:
        """Let the job bind and listen on the port. The lock stays (no other fsdp-tui run takes it) and so
        does the hold (the system hands the port to nobody else before the job binds it)."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def close(self) -> None:
        self.release_listener()
        for held in (self.hold, self.lock):
            if held is not None:
                held.close()
        self.hold = self.lock = None


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


def _hold(port: int):
    """``port`` bound and never listening (port 0: one the system picks), ``SO_REUSEADDR``, dual-stack where
    the machine has IPv6: out of the system's reach for anyone else, open to a job that names it."""
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        host = "::"
    except OSError:  # no IPv6 on this machine
        s, host = socket.socket(socket.AF_INET, socket.SOCK_STREAM), "0.0.0.0"
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
    except OSError:
        s.close()
        raise
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
    """``(claim, None)`` or ``(None, why not)``; port 0: one the system picks. The hold binds first (it
    never listens, so it disturbs nobody, and a listening socket would refuse it), then the lock, and the
    listener only once the port is this run's: another run's job about to bind it never meets it."""
    try:
        hold = _hold(port)
    except OSError as err:
        return None, err.strerror or str(err)
    port = hold.getsockname()[1]
    lock = _lock(port)
    if lock is None:
        hold.close()
        return None, "another fsdp-tui run on this machine has claimed it"
    try:
        listener = _listen(port)
    except OSError as err:
        hold.close()
        if lock:
            lock.close()
        return None, err.strerror or str(err)
    return Claim(port, lock or None, listener, hold), None


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
