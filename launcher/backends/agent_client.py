"""The launcher's side of the agent protocol: framed, versioned requests over any byte channel.

An :class:`AgentLink` is one node's agent. It opens its channel through an *opener* (a local pipe, an
SSH channel), keeps one request in flight at a time, and, when the channel drops, re-opens it with
backoff for ``lost_after_s`` before declaring the node lost. Reconnects stay in here: callers see
answers, or a :class:`NodeError` that names the node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from launcher.backends.agent import wire
from launcher.backends.base import AgentStartFailed, LinkState, LinkWatcher, NodeError, NodeLost
from launcher.untrusted import clean_reply, printable

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0
BANNER_BYTES = 2000


class Channel(Protocol):
    """A byte channel to a booting agent (the agent's stdin and stdout)."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    async def readline(self) -> bytes: ...

    async def readexactly(self, n: int) -> bytes: ...

    async def stderr_tail(self, timeout_s: float) -> str:
        """What the agent's process wrote to stderr, once it has ended (why it could not start)."""
        ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None:
        """Until what ``close`` started has ended (the agent's process reaped, the connection gone): a
        process or transport left behind outlives the event loop and complains at exit."""
        ...


def last_words(stderr: str) -> str:
    """What a failed command said, for a message: a Python traceback's last line, else the tail."""
    if "Traceback (most recent call last)" in stderr:
        lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith((" ", "\t"))]
        return lines[-1][-600:] if lines else stderr[-600:]
    return stderr[-600:]


class ChannelDropped(ConnectionError):
    """The channel went away (connection reset, process ended): worth re-opening."""


class Unreachable(NodeError):
    """The node could not be connected to: final on the first try, retried once it had been reached."""


Opener = Callable[[], Awaitable[Channel]]


class AgentError(NodeError):
    """The agent answered that a request failed; the message says why, naming the node."""


class AgentLink:
    def __init__(self, rank: int, label: str, opener: Opener, *, lost_after_s: float,
                 on_link: LinkWatcher | None = None, agent_label: str = "") -> None:
        self.rank, self.label = rank, label
        self.opener = opener
        self.lost_after_s = lost_after_s
        self.on_link = on_link
        self.agent_label = agent_label
        """How the agent is started, for the message when it cannot be (``python3 in ~/.fsdp-tui/...``)."""
        self.channel: Channel | None = None
        self.lock = asyncio.Lock()
        self.reached = False
        self.lost: str | None = None
        """Why the node was declared lost; later calls then try once instead of for minutes."""
        self.state = LinkState.OK
        self.closed: list[Channel] = []
        """Channels closed along the way (dropped, refused), waited for at ``close``."""

    def _tell(self, state: LinkState, detail: str) -> None:
        self.state = state
        if self.on_link is not None:
            self.on_link(self.rank, state, detail)

    async def call(self, op: str, body: bytes = b"", **fields) -> tuple[dict, bytes]:
        """One request; the agent's answer header and body. ``AgentError`` when it says the request failed."""
        header, data = await self._retrying(lambda: self._once({"op": op, **fields}, body))
        header = clean_reply(header)  # a node's words enter here, once: printable from here on
        if not header.get("ok"):
            raise AgentError(f"{self.label}: {header.get('error') or 'the agent failed without saying why'}", self.rank)
        return header, data

    async def _once(self, request: dict, body: bytes) -> tuple[dict, bytes]:
        async with self.lock:
            if self.channel is None:
                self.channel = await self._open()
            channel = self.channel
            try:
                channel.write(wire.encode(request, body))
                await channel.drain()
                line = await channel.readline()
                if not line:
                    raise ChannelDropped("the agent's channel closed")
                n_head, n_body = wire.parse_sizes(line)
                header = wire.decode_header(await channel.readexactly(n_head))
                data = await channel.readexactly(n_body) if n_body else b""
            except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError, OSError, wire.FrameError) as err:
                self._drop()
                raise ChannelDropped(str(err) or type(err).__name__) from None
            except asyncio.CancelledError:
                self._drop()  # its answer may be on its way: the next request must not read it as its own
                raise
            return header, data

    async def _open(self) -> Channel:
        channel = await self.opener()
        banner = b""  # what a login shell's rc files or an interpreter wrapper print before the agent
        try:
            while True:
                line = await channel.readline()
                if not line:
                    break
                if line.startswith(wire.READY.encode()):
                    self._check_version(line, channel)
                    self.reached = True
                    return channel
                banner = (banner + line)[-BANNER_BYTES:]
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as err:
            self._close(channel)
            raise ChannelDropped(str(err) or type(err).__name__) from None
        detail = printable(await channel.stderr_tail(5.0), newlines=True).strip()
        self._close(channel)
        if detail:  # the agent's command failed: retrying cannot help
            where = f" with {self.agent_label}" if self.agent_label else ""
            raise AgentStartFailed(f"{self.label}: the agent could not start{where}: {last_words(detail)}",
                                   self.rank)
        raise ChannelDropped(f"the agent's channel closed before it was ready ({banner[-200:]!r})")

    def _check_version(self, line: bytes, channel: Channel) -> None:
        parts = line.decode(errors="replace").split()
        version = printable(parts[-2]) if len(parts) >= 2 else ""
        if version != str(wire.PROTOCOL):
            self._close(channel)
            raise NodeError(f"{self.label}: the agent speaks protocol {version or '?'}, this launcher "
                            f"{wire.PROTOCOL}; reinstall fsdp-tui here", self.rank)

    def _drop(self) -> None:
        if self.channel is not None:
            self._close(self.channel)
            self.channel = None

    def _close(self, channel: Channel) -> None:
        channel.close()
        self.closed.append(channel)

    async def _retrying(self, call: Callable[[], Awaitable[tuple[dict, bytes]]]) -> tuple[dict, bytes]:
        """``await call()``, re-opening the channel with backoff while it keeps dropping."""
        if self.lost is not None:  # lost before: one try (a stop must still reach it if it is back)
            try:
                return await call()
            except (ChannelDropped, Unreachable):
                self._drop()
                raise NodeLost(self.lost, self.rank) from None
        delay, deadline, dropped = BACKOFF_START_S, None, False
        while True:
            try:
                result = await call()
            except (ChannelDropped, Unreachable) as err:
                if isinstance(err, Unreachable) and not self.reached:
                    raise  # never reached: a wrong host or key, not a blip
                deadline = deadline or time.monotonic() + self.lost_after_s
                if time.monotonic() + delay > deadline:
                    self.lost = (f"{self.label}: lost: no connection for {self.lost_after_s:.0f} s "
                                 f"({_short(err)}); check the host and the network")
                    self._tell(LinkState.LOST, self.lost)
                    raise NodeLost(self.lost, self.rank) from None
                if not dropped:
                    self._tell(LinkState.RECONNECTING, f"connection dropped ({_short(err)}); reconnecting")
                dropped = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            if dropped:
                self._tell(LinkState.OK, "reconnected")
            return result

    async def close(self) -> None:
        self._drop()
        closed, self.closed = self.closed, []
        await asyncio.gather(*(channel.wait_closed() for channel in closed), return_exceptions=True)


def _short(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text.split(": ", 1)[1] if text.startswith("node ") and ": " in text else text
