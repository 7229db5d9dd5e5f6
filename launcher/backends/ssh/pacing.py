"""How many SSH connections one operator process opens at once.

A launch, a cancel, the editor's glance or a reconnect after a network blip may want a connection to every
node at the same moment. Opened all at once, 64 handshakes (key exchange, host-key check, login) contend
for this machine's cores and for a shared jump host's ``MaxStartups`` (OpenSSH drops unauthenticated
connections past 10 by default). So at most :data:`CONNECT_AT_ONCE` are being opened at a time; an open
connection holds no slot. A dead host holds one slot for its own connect timeout, and the other nodes go
on through the rest. Connections to one and the same host (every node of a SLURM run is reached through
its login node) open at most :data:`PER_HOST_AT_ONCE` at a time, under that ``MaxStartups``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

CONNECT_AT_ONCE = 16
"""Connections being opened at the same time, per backend (one run's nodes)."""
PER_HOST_AT_ONCE = 8
"""Of those, to one host (as the run names it): below OpenSSH's default ``MaxStartups 10``."""

T = TypeVar("T")


class ConnectGate:
    """A bound on connections being opened at once, for one backend: each event loop gets its own
    semaphore (a run's backend can outlive the loop that made it, as in the app's workers)."""

    def __init__(self, limit: int = CONNECT_AT_ONCE, per_host: int = PER_HOST_AT_ONCE) -> None:
        self.limit, self.per_host = limit, per_host
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._hosts: dict[str, asyncio.Semaphore] = {}
        self.opening = 0
        """How many are being opened now."""
        self.most = 0
        """The most that were being opened at once (what the bound held to)."""
        self.opening_to: dict[str, int] = {}
        self.most_to: dict[str, int] = {}
        """The same, per host."""

    def _semaphores(self, host: str) -> tuple[asyncio.Semaphore, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            self._loop, self._slots, self._hosts = loop, asyncio.Semaphore(self.limit), {}
        if host not in self._hosts:
            self._hosts[host] = asyncio.Semaphore(self.per_host)
        return self._hosts[host], self._slots

    async def through(self, opening: Callable[[], Awaitable[T]], host: str = "") -> T:
        """``await opening()`` once a slot is free, for all and for ``host`` (timeouts inside it count
        from then, not from the queue)."""
        to_host, slots = self._semaphores(host)
        async with to_host, slots:
            self.opening += 1
            self.opening_to[host] = self.opening_to.get(host, 0) + 1
            self.most = max(self.most, self.opening)
            self.most_to[host] = max(self.most_to.get(host, 0), self.opening_to[host])
            try:
                return await opening()
            finally:
                self.opening -= 1
                self.opening_to[host] -= 1
