"""Node backends: how the launcher reaches one node. ``LocalNode`` is this machine, no SSH."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

from launcher.plan import TRAINER_PKG_DIR, NodePlan, RunPlan

AGENT_SOURCE = Path(__file__).with_name("agent.py")
TRAINER_SOURCE = Path(__file__).resolve().parents[1] / "trainer"
DEFAULT_PYTHON = "python3"


class NodeError(RuntimeError):
    """A node could not be prepared or reached; the message names the node and what to do."""


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
        argv = list(self.node.argv)
        if argv and argv[0] == self.plan.workload.environment.python:
            argv[0] = self.python
        return {"argv": argv, "env": self.node.env, "dir_env": self.node.dir_env, "secrets": secrets,
                "python": self.python, "attempt": attempt}

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

    async def read(self, name: str, offset: int, limit: int = 4 << 20) -> bytes:
        return await asyncio.to_thread(self._read, name, offset, limit)

    def _read(self, name: str, offset: int, limit: int) -> bytes:
        try:
            with open(self.dir / name, "rb") as f:
                f.seek(offset)
                return f.read(limit)
        except FileNotFoundError:
            return b""
