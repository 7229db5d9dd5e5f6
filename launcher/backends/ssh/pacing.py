"""How many SSH connections one operator process opens at once.

A launch, a cancel, the editor's glance or a reconnect after a network blip may want a connection to every
node at the same moment. Opened all at once, 64 handshakes (key exchange, host-key check, login) contend
for this machine's cores and for a shared jump host's ``MaxStartups`` (OpenSSH drops unauthenticated
connections past 10 by default). So at most :data:`CONNECT_AT_ONCE` are being opened at a time; an open
connection holds no slot. A dead host holds one slot for its own connect timeout, and the other nodes go
on through the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

CONNECT_AT_ONCE = 16
"""Connections being opened at the same time, per backend (one run's nodes)."""

T = TypeVar("T")


class ConnectGate:
    """A bound on connections being opened at once, for one backend: each event loop gets its own
    semaphore (a run's backend can outlive the loop that made it, as in the app's workers)."""

    def __init__(self, limit: int = CONNECT_AT_ONCE) -> None:
        self.limit = limit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self.opening = 0
        """How many are being opened now."""
        self.most = 0
        """The most that were being opened at once (what the bound held to)."""

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            self._loop, self._slots = loop, asyncio.Semaphore(self.limit)
        return self._slots

    async def through(self, opening: Callable[[], Awaitable[T]]) -> T:
        """``await opening()`` once a slot is free (timeouts inside it count from then, not from the queue)."""
        async with self._semaphore():
            self.opening += 1
            self.most = max(self.most, self.opening)
            try:
                return await opening()
            finally:
                self.opening -= 1
