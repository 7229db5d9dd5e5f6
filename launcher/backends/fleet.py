"""Machines you reach one by one: an agent per node, over a local pipe (this machine) or SSH.

Fan-out calls run on every node at once and return every node's outcome; files travel over the agent's
own channel (chunked, size- and hash-checked), so no node needs SFTP.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from launcher.backends.agent_client import AgentError, AgentLink
from launcher.backends.base import (
    STREAM_FILES,
    Backend,
    CheckpointListing,
    ExportResult,
    LinkWatcher,
    NodeError,
    NodeInfo,
    NodeStatus,
    PortClaim,
    PortTaken,
    Reach,
    RemovedFiles,
    SchedulerCause,
    SchedulerCheck,
    ScriptRun,
    StackDump,
    StopOutcome,
    Stream,
    UsageSample,
)
from launcher.backends.ckpt_files import NodeCheckpointFiles
from launcher.backends.replies import gpus_from_wire
from launcher.backends.shipping import write_trees
from launcher.backends.ssh.pacing import ConnectGate
from launcher.backends.transfer import fetch_tree, upload
from launcher.events import GpuSample
from launcher.untrusted import printable
from launcher.words import node_at
from launcher.workload.ckpt_place import CheckpointPlace, judge_marks
from launcher.workload.dry_run import DryRun, dry_run_of
from launcher.workload.plan import (
    RANK_TAG_ENV,
    RANK_TAG_TEMPLATE,
    TRAINER_PKG_DIR,
    NodePlan,
    RunPlan,
    with_rendezvous,
)
from trainer.wire.ckpt_paths import expand_path, url_scheme
from trainer.wire.protocol import RUN_ID_ENV

DEFAULT_PYTHON = "python3"
LOCAL_LOST_AFTER_S = 5.0
"""A local agent that cannot be started again within this long is gone (its machine is this one)."""


def _is_local(node: NodePlan) -> bool:
    return node.host is None or node.host.is_local


class AgentFleet:
    """The Backend for runs on this machine and on SSH hosts (each node may be either).

    Owns a link per node (its agent over a local pipe or SSH, reconnecting by itself) and everything a run
    of agents asks through them: shipping, starting, reading, stopping, checkpoints. The SLURM backend
    composes one for its nodes' folders on the cluster (:mod:`launcher.backends.slurm.backend`)."""

    def __init__(self, plan: RunPlan, *, on_link: LinkWatcher | None = None, agent_python: str | None = None) -> None:
        self.plan = plan
        self.on_link = on_link
        self.agent_python = agent_python
        self.gate = ConnectGate()
        """SSH connections this run's nodes open at once (a launch, a cancel, reconnects after a blip)."""
        self.links = [self._link(n) for n in plan.nodes]
        self.reached: dict[int, Any] = {}
        """The connections :meth:`reach` opened, each kept for its node's next script: a launch's cheap checks
        run over it with no agent booted and no second handshake (BENCHMARKS.md, launch fan-out). Closed
        with the fleet when unused."""

    def python_of(self, node: NodePlan) -> str:
        """The interpreter a node's job runs with: on this machine, ``python3`` means this one."""
        python = self.plan.workload.environment.python
        return sys.executable if _is_local(node) and python == DEFAULT_PYTHON else python

    def label(self, rank: int) -> str:
        return node_at(rank, self.plan.nodes[rank].host_display)

    def node_info(self, rank: int) -> NodeInfo:
        node = self.plan.nodes[rank]
        return NodeInfo(rank, self.label(rank), self.python_of(node), _is_local(node))

    def _link(self, node: NodePlan) -> AgentLink:
        ssh, host = self.plan.workload.ssh, node.host
        if host is None or host.is_local:
            from launcher.backends.local import open_local

            def opener():
                return open_local(node.node_dir)
            lost_after = LOCAL_LOST_AFTER_S
            agent = f"{sys.executable} in {node.node_dir}"
        else:
            from launcher.backends.ssh.channel import open_ssh

            python = self.agent_python or self.python_of(node)

            def opener():
                return self.gate.through(lambda: open_ssh(host, ssh, python, node.node_dir), host.display)
            lost_after = ssh.lost_after_s
            agent = f"{python} in {node.node_dir}"
        return AgentLink(node.node_rank, self.label(node.node_rank), opener, lost_after_s=lost_after,
                         on_link=self.on_link, agent_label=agent)

    # -- planning ----------------------------------------------------------------------------------

    def _located(self) -> RunPlan:
        node0 = self.plan.nodes[0]
        if not self.plan.master_addr_is_alias or node0.host is None:
            return self.plan
        from launcher.backends.ssh.config import SshConfigError, resolve

        try:
            addr = resolve(node0.host, self.plan.workload.ssh).hostname
        except SshConfigError as err:
            raise NodeError(f"{node0.host_display}: {err}", 0) from None
        return with_rendezvous(self.plan, addr=addr)

    def dry_run(self) -> DryRun:
        return dry_run_of(self._located())

    async def locate(self) -> RunPlan:
        self.plan = await asyncio.to_thread(self._located)
        return self.plan

    def use_plan(self, plan: RunPlan) -> None:
        """Carry on with ``plan`` (the same nodes; e.g. another rendezvous port)."""
        self.plan = plan

    async def reach(self, rank: int, timeout_s: float) -> Reach:
        host = self.plan.nodes[rank].host
        if host is None or host.is_local:
            return Reach(rank, self.label(rank), True, "this machine")
        from launcher.backends.ssh.connect import SshError, connect

        try:
            conn = await self.gate.through(lambda: asyncio.wait_for(connect(host, self.plan.workload.ssh),
                                                                    timeout_s), host.display)
        except asyncio.TimeoutError:
            return Reach(rank, self.label(rank), False, f"no answer within {timeout_s:.0f} s")
        except SshError as err:
            return Reach(rank, self.label(rank), False, str(err), blocker=not err.transient)
        self._forget_reached(rank)
        self.reached[rank] = conn
        return Reach(rank, self.label(rank), True, "reachable, host key known")

    def _forget_reached(self, rank: int):
        conn = self.reached.pop(rank, None)
        if conn is not None:
            conn.close()
        return conn

    # -- fan-out helpers ---------------------------------------------------------------------------

    async def _every_node(self, call) -> None:
        """``call(rank)`` on every node at once; ``NodeError`` naming every node that failed."""
        await self._every_nodes(call, [n.node_rank for n in self.plan.nodes])

    async def _every_nodes(self, call, ranks: list[int]) -> None:
        results = await asyncio.gather(*(call(rank) for rank in ranks), return_exceptions=True)
        failed = [(rank, r) for rank, r in zip(ranks, results, strict=True) if isinstance(r, BaseException)]
        for _, r in failed:
            if not isinstance(r, (NodeError, OSError)):
                raise r
        if len(failed) == 1 and isinstance(failed[0][1], PortTaken):
            raise failed[0][1]
        if failed:
            rank, err = failed[0] if len(failed) == 1 else (None, None)
            # One node failed: the run's triage names it, whether or not its error carries the rank (an OSError).
            rank = rank if (own := getattr(err, "node_rank", None)) is None else own
            # Nodes reached through one machine (a SLURM login node) fail alike: each cause said once.
            raise NodeError("; ".join(dict.fromkeys(str(r) for _, r in failed)), rank)

    # -- preparing and starting --------------------------------------------------------------------

    async def prepare(self) -> None:
        plan = self.plan
        if plan.code_root is not None and not plan.code_root.is_dir():
            raise NodeError(f"code_source folder {plan.code_root} does not exist")
        with tempfile.TemporaryDirectory(prefix="fsdp-tui-ship-") as tmp:
            trees = await asyncio.to_thread(write_trees, plan, Path(tmp))

            async def one(rank: int) -> None:
                link = self.links[rank]
                await link.call("write", plan.parameters_yaml.encode("utf-8"), name="parameters.yaml")
                for tree in trees:
                    await upload(link, tree)

            await self._every_node(one)

    async def claim_port(self, port: int) -> PortClaim:
        header, _ = await self.links[0].call("port", port=port)
        return PortClaim(bool(header.get("free", True)), header.get("reason", ""), header.get("suggest"),
                         header.get("port"))

    def job_spec(self, node: NodePlan, secrets: dict[str, str], attempt: int) -> dict:
        """What the agent's ``start`` gets in the request's body (never on a command line: it holds secrets)."""
        python = self.python_of(node)
        argv = list(node.argv)
        if argv and argv[0] == self.plan.workload.environment.python:
            argv[0] = python
        retries = self.plan.workload.max_retries
        return {"argv": argv, "env": node.env, "dir_env": node.dir_env, "secrets": secrets, "python": python,
                "rendezvous_port": self.plan.master_port if node.node_rank == 0 else None,
                "attempt": attempt, "dependencies": list(self.plan.dependencies),
                "venv_root": self.plan.venv_root, "iface_env": list(node.iface_env),
                "rank_tag": {RANK_TAG_ENV: RANK_TAG_TEMPLATE} if node.rank_tag else {},
                "marker": f"{attempt} of {retries + 1}" if retries else (str(attempt) if attempt > 1 else None)}

    async def start(self, secrets: dict[str, str], attempt: int) -> None:
        """Node 0 first (it claims the rendezvous port for the job's life: :class:`PortTaken` when it cannot),
        then every other node at once."""
        async def one(rank: int) -> None:
            spec = self.job_spec(self.plan.nodes[rank], secrets, attempt)
            header, _ = await self.links[rank].call("start", json.dumps(spec).encode("utf-8"))
            if header.get("port_taken"):
                raise PortTaken(f"{self.label(rank)}: {header.get('error') or 'the rendezvous port is taken'}", rank)

        await self._every_nodes(one, [0])
        if len(self.plan.nodes) > 1:
            await self._every_nodes(one, [n.node_rank for n in self.plan.nodes[1:]])

    # -- watching ----------------------------------------------------------------------------------

    async def status(self, rank: int) -> NodeStatus:
        header, _ = await self.links[rank].call("status")
        return NodeStatus.from_wire(rank, header)

    async def read(self, rank: int, stream: Stream, offset: int, limit: int, wait_s: float = 0.0) -> bytes:
        _, data = await self.links[rank].call("read", name=STREAM_FILES[stream], offset=offset, limit=limit,
                                              wait=wait_s)
        return data

    async def read_rank(self, rank: int, global_rank: int, offset: int, limit: int) -> bytes:
        _, data = await self.links[rank].call("read", name=f"rank-{int(global_rank)}.log", offset=offset, limit=limit)
        return data

    async def gpus(self, rank: int) -> tuple[GpuSample, ...]:
        header, _ = await self.links[rank].call("gpus")
        return gpus_from_wire(header)

    async def usage(self, rank: int) -> UsageSample | None:
        try:
            header, _ = await self.links[rank].call("usage")
        except AgentError:
            return None  # an agent that cannot sample (a node's /proc unreadable): no figure, not a failure
        return UsageSample.from_wire(header.get("usage"))

    async def run_script(self, rank: int, python: str, script: str, timeout_s: float) -> ScriptRun:
        conn = self.reached.pop(rank, None)
        if conn is not None:
            from launcher.backends.ssh.channel import run_script

            try:
                ran = await run_script(conn, python, script, timeout_s)
            finally:
                conn.close()
            if ran is not None:
                return ScriptRun(*ran)
        header, _ = await self.links[rank].call("run", script.encode("utf-8"), python=python, timeout=timeout_s)
        return ScriptRun(header.get("exit_status"), header.get("stdout", ""), header.get("stderr", ""))

    async def stacks(self, rank: int) -> tuple[StackDump, ...]:
        header, _ = await self.links[rank].call("stacks", python=self.python_of(self.plan.nodes[rank]))
        return StackDump.many_from_wire(header.get("stacks"))

    # -- stopping ----------------------------------------------------------------------------------

    async def scheduler_cause(self) -> SchedulerCause | None:
        """No scheduler: the nodes' logs and exit codes are all there is."""
        return None

    async def stop(self, grace_s: float, ranks: tuple[int, ...] | None = None) -> tuple[StopOutcome, ...]:
        async def one(rank: int) -> StopOutcome:
            try:
                header, _ = await self.links[rank].call("stop", grace=grace_s)
            except NodeError as err:
                return StopOutcome(rank, self.label(rank), False, error=str(err))
            return StopOutcome(rank, self.label(rank), bool(header.get("stopped")), tuple(header.get("left", ())),
                               header.get("was"), bool(header.get("found")))

        wanted = [n.node_rank for n in self.plan.nodes if ranks is None or n.node_rank in ranks]
        return tuple(await asyncio.gather(*(one(rank) for rank in wanted)))

    # -- checkpoints (where rank 0 wrote them, or a gather's holder) ----------------------------

    def job_env(self, rank: int = 0) -> dict[str, str]:
        return {**self.plan.nodes[rank].env, RUN_ID_ENV: self.plan.run_id}

    async def checkpoints(self, output_dir: str, rank: int = 0, root: str | None = None) -> CheckpointListing:
        try:
            header, _ = await self.links[rank].call("ckpt_list", output_dir=output_dir, root=root,
                                                    env=self.job_env(rank))
        except NodeError as err:
            return CheckpointListing(rank, self.label(rank), root or output_dir, error=str(err))
        return CheckpointListing.from_wire(rank, self.label(rank), root or output_dir, header)

    async def delete_checkpoint(self, output_dir: str, name: str, rank: int = 0, root: str | None = None, *,
                                writer: str | None = None, continues: tuple[str, ...] = ()) -> None:
        await self.links[rank].call("ckpt_delete", output_dir=output_dir, env=self.job_env(rank), name=name,
                                    root=root, writer=writer, continues=list(continues))

    async def export_checkpoint(self, output_dir: str, name: str, copy_to: str | None = None,
                                merged: bool = False, rank: int = 0, root: str | None = None,
                                url: str | None = None, job_env: dict[str, str] | None = None) -> ExportResult:
        node = self.plan.nodes[rank]
        header, _ = await self.links[rank].call(
            "ckpt_export", json.dumps(job_env or {}).encode("utf-8"), output_dir=output_dir,
            env=self.job_env(rank), name=name, python=self.python_of(node), root=root, url=url,
            pythonpath=TRAINER_PKG_DIR if self.plan.uses_builtin_trainer else "", merged=merged)
        path, files, merged_path = header.get("path"), header.get("files"), header.get("merged")
        if not isinstance(path, str) or not path:
            raise NodeError(f"{self.label(rank)}: the export answered without its folder; look at the node's log")
        result = ExportResult(path, tuple(f for f in files if isinstance(f, str)) if isinstance(files, list) else (),
                              merged=merged_path if isinstance(merged_path, str) and merged_path else None,
                              reused=header.get("reused") is True)
        if copy_to is None:
            return result
        local = await fetch_tree(self.links[rank], path, Path(copy_to))
        merged_copy = None
        if result.merged is not None:
            merged_copy = str(await fetch_tree(self.links[rank], result.merged, Path(copy_to + "-merged")))
        return replace(result, local_copy=str(local), merged_copy=merged_copy)

    def checkpoint_files(self, rank: int) -> NodeCheckpointFiles:
        return NodeCheckpointFiles(self.links[rank], self.job_env(rank))

    async def checkpoint_place(self, output_dir: str) -> CheckpointPlace:
        """Node 0 writes a marker in its checkpoints folder, every other node looks for it in its own."""
        url = expand_path(output_dir, self.job_env())
        if url_scheme(url):
            return CheckpointPlace("bucket", output_dir, roots=(url,))  # as the job sees it: the same everywhere
        if len(self.plan.nodes) == 1:
            return CheckpointPlace("shared", output_dir, shares=(True,), detail="one node")
        token = secrets.token_hex(8)
        try:
            mark, _ = await self.links[0].call("place", action="mark", token=token, output_dir=output_dir,
                                               env=self.job_env())
        except NodeError as err:
            return judge_marks(output_dir, [], [None], [str(err)])

        async def look(rank: int) -> tuple[str, bool | None, str]:
            try:
                header, _ = await self.links[rank].call("place", action="look", token=token, output_dir=output_dir,
                                                        env=self.job_env(rank))
            except NodeError as err:
                return "", None, str(err)
            return printable(str(header.get("root", ""))), header.get("seen") is True, ""

        try:
            found = await asyncio.gather(*(look(n.node_rank) for n in self.plan.nodes[1:]))
        finally:
            try:
                await self.links[0].call("place", action="clear", token=token, output_dir=output_dir,
                                         env=self.job_env(), created=mark.get("created", []))
            except NodeError:
                pass  # the marker stays: a hidden file, harmless
        root0 = printable(str(mark.get("root", "")))
        return judge_marks(output_dir, [root0, *(r for r, _, _ in found)], [True, *(s for _, s, _ in found)],
                           ["", *(e for _, _, e in found)])

    async def remove_files(self, rank: int) -> RemovedFiles:
        node = self.plan.nodes[rank]
        try:
            header, _ = await self.links[rank].call("remove")
        except (NodeError, AgentError) as err:
            return RemovedFiles(rank, self.label(rank), node.node_dir, error=str(err))
        return RemovedFiles.from_wire(rank, self.label(rank), node.node_dir, header)

    async def scheduler_checks(self, quick: bool) -> tuple[SchedulerCheck, ...]:
        return ()  # nodes reached one by one: no scheduler to ask

    async def close(self) -> None:
        for rank in list(self.reached):
            self._forget_reached(rank)
        await asyncio.gather(*(link.close() for link in self.links), return_exceptions=True)


def create_backend(plan: RunPlan, *, on_link: LinkWatcher | None = None, agent_python: str | None = None) -> Backend:
    """The registry's entry (:mod:`launcher.backends.registry`): an agent per node, over a local pipe or SSH.
    Typed as the protocol, so that the type checker holds the fleet to it."""
    return AgentFleet(plan, on_link=on_link, agent_python=agent_python)
