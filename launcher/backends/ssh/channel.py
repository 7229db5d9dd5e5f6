"""The agent's channel over SSH: one verified connection per node, one process channel (no PTY) that
boots the agent from stdin. The job itself never depends on this channel (the agent detached it)."""

from __future__ import annotations

import asyncio

from launcher.backends import bundle
from launcher.backends.agent_client import Channel, ChannelDropped, Unreachable
from launcher.backends.base import NodeError
from launcher.backends.ssh.connect import SshError, connect
from launcher.untrusted import printable
from launcher.workload.hosts import HostTarget
from launcher.workload.machines import Ssh

CLOSE_WAIT_S = 5.0
"""How long a closed connection gets to say goodbye before the launcher moves on."""


class SshChannel:
    """asyncssh's process streams as a Channel; its errors become ``ConnectionError`` (a dropped channel)."""

    def __init__(self, conn, proc) -> None:
        import asyncssh

        self.conn, self.proc = conn, proc
        self.errors = asyncssh.Error

    def write(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
        except self.errors as err:
            raise ConnectionResetError(str(err) or type(err).__name__) from None

    async def drain(self) -> None:
        try:
            await self.proc.stdin.drain()
        except self.errors as err:
            raise ConnectionResetError(str(err) or type(err).__name__) from None

    async def readline(self) -> bytes:
        try:
            return await self.proc.stdout.readline()
        except self.errors as err:
            raise ConnectionResetError(str(err) or type(err).__name__) from None

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self.proc.stdout.readexactly(n)
        except self.errors as err:
            raise ConnectionResetError(str(err) or type(err).__name__) from None

    async def stderr_tail(self, timeout_s: float) -> str:
        try:
            data = await asyncio.wait_for(self.proc.stderr.read(), timeout_s)
        except (asyncio.TimeoutError, self.errors):
            return ""
        return data.decode(errors="replace") if isinstance(data, bytes) else str(data)

    def close(self) -> None:
        self.proc.close()
        self.conn.close()

    async def wait_closed(self) -> None:
        try:
            await asyncio.wait_for(self.conn.wait_closed(), CLOSE_WAIT_S)
        except (asyncio.TimeoutError, OSError, self.errors):
            pass


async def run_script(conn, python: str, script: str, timeout_s: float) -> tuple[int | None, str, str] | None:
    """``script`` on ``python``'s stdin over an open connection, as the agent's ``run`` does it (no agent
    booted for one script): its exit status (``None`` when it did not finish in time), stdout and stderr,
    made printable; ``None`` when the connection failed under it."""
    import shlex

    import asyncssh

    try:
        done = await conn.run(shlex.join([python, "-"]), input=script, timeout=timeout_s, check=False)
    except asyncssh.TimeoutError:
        return None, "", f"the probe did not finish within {timeout_s:.0f}s"
    except (asyncssh.Error, OSError):
        return None
    return done.exit_status, printable(done.stdout or "", newlines=True), printable(done.stderr or "", newlines=True)


async def open_ssh(host: HostTarget, ssh: Ssh, python: str, node_dir: str) -> Channel:
    """Connect (host key verified) and boot the agent in ``node_dir`` under ``python``."""
    import asyncssh

    try:
        conn = await connect(host, ssh)
    except SshError as err:
        if err.transient:
            raise Unreachable(str(err)) from None
        raise NodeError(str(err)) from None
    try:
        proc = await conn.create_process(bundle.boot_command(python, node_dir), encoding=None)
    except (asyncssh.Error, OSError) as err:
        conn.close()
        raise ChannelDropped(f"{host.display}: cannot open a channel: {err}") from None
    try:
        proc.stdin.write(bundle.boot_payload())
    except (asyncssh.Error, OSError):
        pass  # the command already ended (a wrong python): its stderr, read at EOF, says why
    return SshChannel(conn, proc)
