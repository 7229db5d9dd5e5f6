"""Node backends: how the launcher reaches one node. ``LocalNode`` is this machine, no SSH."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

from launcher.plan import TRAINER_PKG_DIR, NodePlan, RunPlan

AGENT_SOURCE = Path(__file__).with_name("agent.py")
TRAINER_SOURCE = Path(__file__).resolve().parents[1] / "trainer"
DEFAULT_PYTHON = "python3"


class NodeError(RuntimeError):
    """A node could not be prepared or reached; the message names the node and what to do."""


def job_spec(plan: RunPlan, node: NodePlan, python: str, secrets: dict[str, str], attempt: int) -> dict:
    """What the agent's ``start`` gets on stdin (never on a command line: it holds the secrets)."""
    return {"argv": list(node.argv), "env": node.env, "dir_env": node.dir_env, "secrets": secrets,
            "python": python, "attempt": attempt, "dependencies": list(plan.workload.environment.dependencies),
            "venv_root": plan.venv_root}


class LocalNode:
    """This machine. The agent runs as a subprocess (as it would over SSH); files are read directly.

    The default interpreter (``python3``) means the one running fsdp-tui, so a local run sees the same
    packages as the app.
    """

    def __init__(self, plan: RunPlan, node: NodePlan) -> None:
        self.plan = plan
        self.node = node
        self.dir = Path(node.node_dir).expanduser()
        python = plan.workload.environment.python
        self.python = sys.executable if python == DEFAULT_PYTHON else python
        self.label = f"node {node.node_rank} ({node.host_display})"

    async def prepare(self) -> None:
        await asyncio.to_thread(self._prepare)

    def _prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(AGENT_SOURCE, self.dir / "agent.py")
        (self.dir / "parameters.yaml").write_text(self.plan.parameters_yaml)
        if self.plan.code_root is not None:
            snap = self.plan.workload.code_source.snapshot
            if not self.plan.code_root.is_dir():
                raise NodeError(f"{self.label}: code_source folder {self.plan.code_root} does not exist")
            shutil.copytree(self.plan.code_root, self.dir / "code", ignore=shutil.ignore_patterns(*snap.exclude),
                            dirs_exist_ok=True)
        if self.plan.uses_builtin_trainer:
            shutil.copytree(TRAINER_SOURCE, self.dir / TRAINER_PKG_DIR / "trainer",
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)

    def spec(self, secrets: dict[str, str], attempt: int) -> dict:
        spec = job_spec(self.plan, self.node, self.python, secrets, attempt)
        if spec["argv"] and spec["argv"][0] == self.plan.workload.environment.python:
            spec["argv"][0] = self.python
        return spec

    async def _agent(self, *args: str, stdin: bytes | None = None) -> dict:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(self.dir / "agent.py"), str(self.dir), *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate(stdin)
        try:
            return json.loads(out.decode() or "{}")
        except ValueError:
            raise NodeError(f"{self.label}: the agent answered {out[:200]!r} {err[-500:]!r}") from None

    async def start(self, secrets: dict[str, str], attempt: int) -> dict:
        result = await self._agent("start", stdin=json.dumps(self.spec(secrets, attempt)).encode())
        if "error" in result:
            raise NodeError(f"{self.label}: {result['error']}")
        return result

    async def status(self) -> dict:
        return await self._agent("status")

    async def stop(self, grace_s: float = 10.0) -> dict:
        return await self._agent("stop", "--grace", str(grace_s))

    async def read(self, name: str, offset: int, limit: int = 4 << 20, wait: float = 0.0) -> bytes:
        """Bytes from ``offset``; with ``wait``, held back until there are some or the job ended (a long
        poll, as the agent answers over SSH)."""
        from launcher.agent import _read_state, _size

        deadline = time.monotonic() + wait
        path = str(self.dir / name)
        while (time.monotonic() < deadline and _size(path) <= offset  # noqa: ASYNC110 - another process writes it
               and _read_state(str(self.dir)).get("state") != "exited"):
            await asyncio.sleep(0.02)
        return await asyncio.to_thread(self._read, name, offset, limit)

    async def gpus(self) -> list[dict]:
        from launcher.agent import gpu_samples

        return await asyncio.to_thread(gpu_samples)

    async def port(self, port: int) -> dict:
        from launcher.agent import port_state

        return await asyncio.to_thread(port_state, port)

    async def close(self) -> None:
        """Nothing to close on this machine."""

    def _read(self, name: str, offset: int, limit: int) -> bytes:
        try:
            with open(self.dir / name, "rb") as f:
                f.seek(offset)
                return f.read(limit)
        except FileNotFoundError:
            return b""


AGENT_BOOT = """import os, sys, types
d = os.path.expanduser(sys.argv[1])
os.makedirs(d, exist_ok=True)
i = sys.stdin.buffer
src = i.read(int(i.readline()))
p = os.path.join(d, "agent.py")
t = "%s.%d" % (p, os.getpid())
with open(t, "wb") as f:
    f.write(src)
os.replace(t, p)
m = types.ModuleType("fsdp_tui_agent")
m.__file__ = p
sys.modules[m.__name__] = m
exec(compile(src, p, "exec"), m.__dict__)
sys.stdout.write("%s\\n" % m.READY)
sys.stdout.flush()
m.serve(d)
"""
"""What the agent channel runs (``python3 -c AGENT_BOOT NODE_DIR``): it makes the node directory,
installs the agent sent on stdin (length line, then source) and serves requests, so a launch needs no
separate upload before its first request. The buffered stdin carries on into ``serve``."""


class SshNode:
    """A node over SSH: the agent arrives over its own channel, code trees go up by SFTP, output is
    read by byte offset.

    One connection per node, re-opened with backoff when it drops; the job on the node is unaffected
    (the agent detached it from the SSH session).
    """

    RECONNECT_FOR_S = 120.0
    """How long a dropped node is retried (backoff up to 10 s) before it is declared lost."""

    def __init__(self, plan: RunPlan, node: NodePlan, on_state=None) -> None:
        import shlex

        self.plan = plan
        self.node = node
        self.host = node.host
        self.ssh = plan.workload.ssh
        self.python = plan.workload.environment.python
        # Paths relative to the remote home (SFTP and commands start there); the agent expands "~".
        self.dir = node.node_dir[2:] if node.node_dir.startswith("~/") else node.node_dir
        self.agent = f"{shlex.quote(self.python)} -c {shlex.quote(AGENT_BOOT)} {shlex.quote(node.node_dir)}"
        self.label = f"node {node.node_rank} ({node.host_display})"
        self.on_state = on_state
        """Called with ``(reconnecting: bool, detail)`` when the connection drops and when it is back."""
        self.conn = None
        self.server = None
        self.lock = asyncio.Lock()
        self.lost: str | None = None
        """Why the node was declared lost; later calls then try once instead of for minutes."""

    async def _conn(self):
        from launcher.ssh import connect

        if self.conn is None:
            self.conn = await connect(self.host, self.ssh)
        return self.conn

    async def _retrying(self, call):
        """``await call()``, re-opening the connection with backoff while it keeps dropping."""
        import asyncssh

        from launcher.ssh import SshError

        if self.lost is not None:  # lost before: one try (a stop must still reach it if it is back), no waiting
            try:
                return await call()
            except (asyncssh.Error, OSError, asyncio.IncompleteReadError, SshError):
                self._drop()
                raise NodeError(self.lost) from None
        delay, deadline, dropped = 0.5, None, False
        while True:
            try:
                result = await call()
                if dropped and self.on_state:
                    self.on_state(False, "reconnected")
                return result
            except (asyncssh.ConnectionLost, asyncssh.DisconnectError, asyncssh.ChannelOpenError, OSError,
                    asyncio.IncompleteReadError) as err:
                self._drop()
                deadline = deadline or time.monotonic() + self.RECONNECT_FOR_S
                if time.monotonic() + delay > deadline:
                    self.lost = (f"{self.label}: lost: no connection for {self.RECONNECT_FOR_S:.0f} s "
                                 f"({err or type(err).__name__}); check the host and the network")
                    raise NodeError(self.lost) from None
                if not dropped and self.on_state:
                    self.on_state(True, f"connection dropped ({err or type(err).__name__}); reconnecting")
                dropped = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10)
            except SshError as err:
                if dropped and deadline and time.monotonic() < deadline:
                    await asyncio.sleep(delay)  # unreachable for now: keep trying until the deadline
                    delay = min(delay * 2, 10)
                    continue
                raise NodeError(str(err)) from None

    def _drop(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    async def _ask(self, request: dict) -> bytes:
        """One request to the node's long-lived ``agent serve`` channel (no process started per poll)."""

        async def once() -> bytes:
            async with self.lock:
                if self.server is None:
                    self.server = await self._open_agent()
                self.server.stdin.write(json.dumps(request).encode() + b"\n")
                header = await self.server.stdout.readline()
                if not header.strip().isdigit():
                    raise ConnectionResetError(f"the agent's channel closed ({header[:200]!r})")
                return await self.server.stdout.readexactly(int(header))

        return await self._retrying(once)

    async def _open_agent(self):
        """Start the agent channel; a node that cannot run it (no such Python, a read-only run root)
        is a clear error, not a dropped connection to retry."""
        from launcher.agent import READY

        server = await (await self._conn()).create_process(self.agent, encoding=None)
        source = AGENT_SOURCE.read_bytes()
        server.stdin.write(b"%d\n" % len(source) + source)
        noise = b""  # what a login shell's rc files print before the agent's first line
        while (line := await server.stdout.readline()) and line.strip() != READY.encode():
            noise = (noise + line)[-2000:]
        if line:
            return server
        try:
            detail = (await asyncio.wait_for(server.stderr.read(), 5)).decode(errors="replace").strip()
        except asyncio.TimeoutError:
            detail = ""
        server.close()
        if detail:  # the command failed; else the connection went, which is retried
            raise NodeError(f"{self.label}: the agent could not start with {self.python} in "
                            f"{self.node.node_dir}: {detail[-600:]}")
        raise ConnectionResetError(f"the agent's channel closed ({noise[-200:]!r})")

    async def prepare(self) -> None:
        import asyncssh

        from launcher.ssh import SshError

        if self.plan.code_root is not None and not self.plan.code_root.is_dir():
            raise NodeError(f"{self.label}: code_source folder {self.plan.code_root} does not exist")
        reply = json.loads(await self._ask({"op": "write", "name": "parameters.yaml",
                                            "text": self.plan.parameters_yaml}) or b"{}")
        if "error" in reply:
            raise NodeError(f"{self.label}: {reply['error']}")
        if self.plan.code_root is None and not self.plan.uses_builtin_trainer:
            return
        try:
            await self._upload(await self._conn())
        except SshError as err:
            raise NodeError(str(err)) from None
        except (asyncssh.Error, OSError) as err:
            raise NodeError(f"{self.label}: uploading to {self.dir} failed: {err}") from None

    async def _upload(self, conn) -> None:
        """The code snapshot and the shipped trainer, by SFTP into the directory the agent made."""
        import tempfile

        async with conn.start_sftp_client() as sftp:
            with tempfile.TemporaryDirectory() as tmp:
                if self.plan.code_root is not None:
                    snap = self.plan.workload.code_source.snapshot
                    staged = Path(tmp) / "code"
                    await asyncio.to_thread(shutil.copytree, self.plan.code_root, staged,
                                            ignore=shutil.ignore_patterns(*snap.exclude))
                    await sftp.put(str(staged), self.dir, recurse=True)
                if self.plan.uses_builtin_trainer:
                    staged = Path(tmp) / TRAINER_PKG_DIR / "trainer"
                    await asyncio.to_thread(shutil.copytree, TRAINER_SOURCE, staged,
                                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                    await sftp.put(str(staged.parent), self.dir, recurse=True)

    async def start(self, secrets: dict[str, str], attempt: int) -> dict:
        spec = job_spec(self.plan, self.node, self.python, secrets, attempt)
        result = json.loads((await self._ask({"op": "start", "spec": spec})).decode() or "{}")
        if "error" in result:
            raise NodeError(f"{self.label}: {result['error']}")
        return result

    async def status(self) -> dict:
        return json.loads((await self._ask({"op": "status"})).decode() or "{}")

    async def stop(self, grace_s: float = 10.0) -> dict:
        return json.loads((await self._ask({"op": "stop", "grace": grace_s})).decode() or "{}")

    async def read(self, name: str, offset: int, limit: int = 4 << 20, wait: float = 0.0) -> bytes:
        return await self._ask({"op": "read", "name": name, "offset": offset, "limit": limit, "wait": wait})

    async def gpus(self) -> list[dict]:
        return json.loads((await self._ask({"op": "gpus"})).decode() or "[]")

    async def port(self, port: int) -> dict:
        return json.loads((await self._ask({"op": "port", "port": port})).decode() or "{}")

    async def close(self) -> None:
        self._drop()


def node_backend(plan: RunPlan, node: NodePlan, on_state=None):
    """This machine for ``localhost`` (or no hosts), SSH for every other host (``on_state``: see SshNode)."""
    if node.host is None or node.host.is_local:
        return LocalNode(plan, node)
    return SshNode(plan, node, on_state)
