"""This machine, no SSH: the node agent runs as a child process and answers over a pipe, exactly as it
does over an SSH channel (one process per node per launcher, not one per poll)."""

from __future__ import annotations

import asyncio
import sys

from launcher.backends import bundle
from launcher.backends.agent_client import Channel
from launcher.paths import user_umask

STREAM_LIMIT = 64 << 20
CLOSE_WAIT_S = 10.0
"""How long a closed agent gets to finish its last answer and exit before it is killed."""


class PipeChannel:
    """The agent's stdin and stdout as a :class:`~launcher.backends.agent_client.Channel`."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # started with pipes
        self.stdin, self.stdout, self.stderr = proc.stdin, proc.stdout, proc.stderr

    def write(self, data: bytes) -> None:
        self.stdin.write(data)

    async def drain(self) -> None:
        await self.stdin.drain()

    async def readline(self) -> bytes:
        return await self.stdout.readline()

    async def readexactly(self, n: int) -> bytes:
        return await self.stdout.readexactly(n)

    async def stderr_tail(self, timeout_s: float) -> str:
        try:
            data = await asyncio.wait_for(self.stderr.read(), timeout_s)
        except asyncio.TimeoutError:
            return ""
        return data.decode(errors="replace")

    def close(self) -> None:
        if self.proc.returncode is None:
            try:
                self.stdin.close()  # the agent's loop ends at end of input
            except (ConnectionError, RuntimeError):
                pass

    async def wait_closed(self) -> None:
        """The agent ends at end of input; one that does not within ``CLOSE_WAIT_S`` is killed. Either way it
        is reaped here, while the event loop still runs."""
        try:
            await asyncio.wait_for(self.proc.wait(), CLOSE_WAIT_S)
        except asyncio.TimeoutError:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
            await self.proc.wait()


async def open_local(node_dir: str, python: str | None = None) -> Channel:
    """Start the agent in ``node_dir`` on this machine (under ``python``, default: this interpreter)."""
    proc = await asyncio.create_subprocess_exec(
        *bundle.boot_argv(python or sys.executable, node_dir), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, limit=STREAM_LIMIT,
        start_new_session=True, umask=user_umask())  # the job's files are the user's, as on any node
    channel = PipeChannel(proc)
    channel.write(bundle.boot_payload())
    return channel
