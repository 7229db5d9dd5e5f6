"""The SLURM backend: one batch job per attempt, submitted and watched through the cluster's login node.

Every node of the run is reached through the login node's agent (over SSH, or a local pipe when this
machine is the login node): each node's directory lives in ``<job_dir>/<run id>/node-<rank>`` on the
filesystem the login and compute nodes share, so logs and metrics are read there at byte offsets,
checkpoints listed there, exactly as for an SSH node: that much is the agents' fleet
(:class:`~launcher.backends.fleet.AgentFleet`), used as it is. What only the scheduler knows (queued or
running, why it waits, how it ended) comes from ``squeue``, asked at most once every few seconds per login
node (:class:`~launcher.backends.slurm.queue.QueueView`).
"""

from __future__ import annotations

from launcher.backends.base import (
    Backend,
    CheckpointListing,
    ExportResult,
    LinkState,
    LinkWatcher,
    NodeInfo,
    NodeStatus,
    PortClaim,
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
from launcher.backends.fleet import AgentFleet
from launcher.backends.slurm.job import SlurmJob
from launcher.backends.slurm.login import LoginNode
from launcher.backends.slurm.script import batch_script, slurm_dry_run
from launcher.backends.slurm.task_files import TaskFiles
from launcher.events import GpuSample
from launcher.workload.ckpt_place import CheckpointPlace
from launcher.workload.dry_run import DryRun
from launcher.workload.plan import RunPlan
from trainer.wire.ckpt_paths import expand_path, url_scheme
from trainer.wire.protocol import CHECKPOINT_SIGNAL_ENV


class SlurmBackend:
    """The Backend for ``compute.slurm`` workloads: the agents' fleet for every node's files, composed with
    the cluster's login node for the job itself.

    Owns the wiring only: the node links and what any fleet of agents does with them (a node's output,
    its checkpoints, exports, removal) are the :class:`AgentFleet`'s; submitting, judging and cancelling
    the job are the :class:`SlurmJob`'s through the :class:`LoginNode`; GPU and usage samples and stack
    dumps come from each node's task through its folder (:class:`TaskFiles`)."""

    def __init__(self, plan: RunPlan, *, on_link: LinkWatcher | None = None, agent_python: str | None = None) -> None:
        self.watcher = on_link
        self.fleet = AgentFleet(plan, on_link=self._login_said if on_link is not None else None,
                                agent_python=agent_python)
        """Every node's link (each to the login node, in its node's folder) and the agents' own calls."""
        self.login = LoginNode(self.fleet)
        """SLURM's commands and the job's own files, through the login node's agent."""
        self.job = SlurmJob(self.login)
        """The attempts' jobs as the scheduler knows them: submitted, judged, cancelled."""
        self.tasks = TaskFiles(self.fleet)
        """What each node's task answers through its folder: GPU and usage samples, stack dumps."""

    @property
    def plan(self) -> RunPlan:
        return self.fleet.plan

    def _login_said(self, rank: int, state: LinkState, detail: str) -> None:
        """A lost login node is not a lost job: say so while reconnecting."""
        if state == LinkState.RECONNECTING and self.job.jobs:
            detail += (f"; the SLURM job may still be running: it is followed again when {self.login.label} "
                       f"answers (for up to {self.fleet.links[rank].lost_after_s / 60:.0f} min, its time limit)")
        if self.watcher is not None:
            self.watcher(rank, state, detail)

    # -- planning and starting ----------------------------------------------------------------------

    def node_info(self, rank: int) -> NodeInfo:
        return self.fleet.node_info(rank)

    def dry_run(self) -> DryRun:
        return slurm_dry_run(self.plan, self.fleet.python_of(self.plan.nodes[0]))

    async def locate(self) -> RunPlan:
        return self.plan  # node 0's address is known only once the job has its nodes

    def use_plan(self, plan: RunPlan) -> None:
        self.fleet.use_plan(plan)

    async def claim_port(self, port: int) -> PortClaim:
        return PortClaim(True)  # chosen on the first node of each job (see the batch script)

    async def prepare(self) -> None:
        """The fleet's shipping to every node's folder, and the agent itself for the nodes' tasks."""
        from launcher.backends.bundle import agent_zip

        await self.fleet.prepare()
        await self.login.write("agent.zip", agent_zip()[0])

    async def start(self, secrets: dict[str, str], attempt: int) -> None:
        plan = self.plan
        python = self.fleet.python_of(plan.nodes[0])
        spec = self.fleet.job_spec(plan.nodes[0], {}, attempt)  # the secrets go to sbatch's environment only
        spec.update(secret_names=sorted(secrets), builtin_trainer=plan.uses_builtin_trainer,
                    port_from_job=plan.workload.compute.master_port is None, rendezvous_port=None)
        if plan.uses_builtin_trainer:
            spec["env"] = {**spec["env"], CHECKPOINT_SIGNAL_ENV: "1"}
        await self.job.submit(attempt, spec, batch_script(plan, attempt, python), secrets)

    async def reach(self, rank: int, timeout_s: float) -> Reach:
        return await self.fleet.reach(rank, timeout_s)

    # -- watching -----------------------------------------------------------------------------------

    async def status(self, rank: int) -> NodeStatus:
        return await self.job.judged(await self.fleet.status(rank))

    async def read(self, rank: int, stream: Stream, offset: int, limit: int, wait_s: float = 0.0) -> bytes:
        return await self.fleet.read(rank, stream, offset, limit, wait_s)

    async def read_rank(self, rank: int, global_rank: int, offset: int, limit: int) -> bytes:
        return await self.fleet.read_rank(rank, global_rank, offset, limit)

    async def gpus(self, rank: int) -> tuple[GpuSample, ...]:
        return await self.tasks.gpus(rank)

    async def usage(self, rank: int) -> UsageSample | None:
        return await self.tasks.usage(rank)

    async def stacks(self, rank: int) -> tuple[StackDump, ...]:
        return await self.tasks.stacks(rank)

    async def run_script(self, rank: int, python: str, script: str, timeout_s: float) -> ScriptRun:
        return await self.fleet.run_script(rank, python, script, timeout_s)

    async def scheduler_cause(self) -> SchedulerCause | None:
        """SLURM's own words on the failed attempt's job (:func:`~launcher.backends.slurm.cause.scheduler_cause`)."""
        from launcher.backends.slurm.cause import scheduler_cause

        current = self.job.current()
        if current is None:
            return None
        attempt, job_id = current
        requeued_run = self.job.jobs.get(attempt - 1) == job_id
        return await scheduler_cause(self.login, job_id, requeued_run, len(self.plan.nodes))

    # -- checkpoints: the nodes' shared folder, through the fleet -----------------------------------

    async def checkpoint_place(self, output_dir: str) -> CheckpointPlace:
        """A SLURM job's nodes work in one folder of the cluster's shared filesystem (``job_dir``): its
        checkpoints are where the login node lists them (nothing to ask); a bucket URL is a bucket."""
        url = expand_path(output_dir, self.fleet.job_env())
        if url_scheme(url):
            return CheckpointPlace("bucket", output_dir, roots=(url,))
        return CheckpointPlace("shared", output_dir, (), (True,) * len(self.plan.nodes),
                               detail="the SLURM job's nodes share the cluster's filesystem")

    async def checkpoints(self, output_dir: str, rank: int = 0, root: str | None = None) -> CheckpointListing:
        return await self.fleet.checkpoints(output_dir, rank, root)

    async def delete_checkpoint(self, output_dir: str, name: str, rank: int = 0, root: str | None = None, *,
                                writer: str | None = None, continues: tuple[str, ...] = ()) -> None:
        await self.fleet.delete_checkpoint(output_dir, name, rank, root, writer=writer, continues=continues)

    async def export_checkpoint(self, output_dir: str, name: str, copy_to: str | None = None,
                                merged: bool = False, rank: int = 0, root: str | None = None,
                                url: str | None = None, job_env: dict[str, str] | None = None) -> ExportResult:
        return await self.fleet.export_checkpoint(output_dir, name, copy_to, merged, rank, root, url, job_env)

    def checkpoint_files(self, rank: int) -> NodeCheckpointFiles:
        return self.fleet.checkpoint_files(rank)

    async def remove_files(self, rank: int) -> RemovedFiles:
        return await self.fleet.remove_files(rank)

    # -- checks and stopping ------------------------------------------------------------------------

    async def scheduler_checks(self, quick: bool) -> tuple[SchedulerCheck, ...]:
        """``sbatch --test-only`` of the attempt's script (partition, account, qos, time limit, node and
        GPU counts as the scheduler sees them; nothing runs) and ``sinfo``'s partition, node count and
        MaxTime; a probe job too without ``quick`` (:mod:`.checks`)."""
        from launcher.backends.slurm.checks import full_checks, test_only
        from launcher.backends.slurm.partition import sinfo_checks

        first = await test_only(self.login)
        if quick:  # test-only accepts a time above MaxTime (EnforcePartLimits=NO): the job would pend forever
            return (first, *await sinfo_checks(self.login))
        return (first, *await full_checks(self.login))

    async def stop(self, grace_s: float, ranks: tuple[int, ...] | None = None) -> tuple[StopOutcome, ...]:
        """``scancel`` the job and wait until SLURM has it out of the queue (:meth:`SlurmJob.stop`)."""
        wanted = [n.node_rank for n in self.plan.nodes if ranks is None or n.node_rank in ranks]
        return await self.job.stop(grace_s, wanted, self.fleet.label)

    async def close(self) -> None:
        await self.fleet.close()


def create_backend(plan: RunPlan, *, on_link: LinkWatcher | None = None, agent_python: str | None = None) -> Backend:
    """The registry's entry (:mod:`launcher.backends.registry`): one SLURM job through the login node's agent.
    Typed as the protocol, so that the type checker holds the backend to it."""
    return SlurmBackend(plan, on_link=on_link, agent_python=agent_python)
