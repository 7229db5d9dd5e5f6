"""The SLURM backend: one batch job per attempt, submitted and watched through the cluster's login node.

Every node of the run is reached through the login node's agent (over SSH, or a local pipe when this
machine is the login node): each node's directory lives in ``<job_dir>/<run id>/node-<rank>`` on the
filesystem the login and compute nodes share, so logs and metrics are read there at byte offsets,
checkpoints listed there, exactly as for an SSH node. What only the scheduler knows (queued or running,
why it waits, how it ended) comes from ``squeue``, asked at most once every few seconds per login node
(:class:`~launcher.backends.slurm.queue.QueueView`).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace

from launcher.backends.agent.slurm_task import GPU_FILE, STACKS_FILE, STACKS_REQUEST, USAGE_SAMPLE_FILE
from launcher.backends.base import (
    LinkState,
    LinkWatcher,
    NodeError,
    NodeStatus,
    PortClaim,
    SchedulerCause,
    SchedulerCheck,
    StackDump,
    StopOutcome,
    UsageSample,
)
from launcher.backends.fleet import AgentFleet
from launcher.backends.slurm.queue import QueueEntry, QueueError, QueueView
from launcher.backends.slurm.script import batch_script, job_file, render_slurm
from launcher.backends.slurm.verdict import judge
from launcher.events import GpuSample
from launcher.paths import data_home
from launcher.untrusted import clean_reply
from launcher.workload.ckpt_place import CheckpointPlace
from launcher.workload.plan import RunPlan
from launcher.workload.slurm import time_minutes, time_option
from trainer.ckpt_layout import expand_path, url_scheme
from trainer.protocol import CHECKPOINT_SIGNAL_ENV

JOBS_FILE = "jobs.json"
GPU_STALE_S = 30.0
STOP_POLL_S = 0.5
STACKS_WAIT_S = 30.0
OUTPUT_LIMIT = 256 << 10
STOP_EXTRA_S = 60.0
"""How long past the grace a cancelled job may stay COMPLETING (SLURM's KillWait, slow nodes)."""


NO_LIMIT_WINDOW_S = 86400.0
"""How long a lost login node is waited for when the job's time limit is the partition's (unknown here)."""


def login_window_s(plan: RunPlan) -> float:
    """How long the login node may stay away once a job runs: the job's own time limit (it may run that
    long without us), never less than ``ssh.lost_after_s``."""
    limit = time_option(plan.workload.compute.slurm, plan.workload.timeout_minutes)
    job_s = time_minutes(limit) * 60 + STOP_EXTRA_S if limit else NO_LIMIT_WINDOW_S
    return max(plan.workload.ssh.lost_after_s, job_s)


class SlurmBackend(AgentFleet):
    """The Backend for ``compute.slurm`` workloads."""

    def __init__(self, plan: RunPlan, *, on_link: LinkWatcher | None = None, **kwargs) -> None:
        self.watcher = on_link
        super().__init__(plan, on_link=self._login_said if on_link is not None else None, **kwargs)
        login = plan.nodes[0].host
        self.login_label = login.display if login is not None else "this machine"
        self.queue = QueueView(login.alias if login is not None else "local", self.ask, data_home() / "slurm")
        self.jobs: dict[int, str] = {}
        """Job id by attempt."""
        self.attempt: int | None = None
        self.submitted_at = 0.0
        self.cancelled: set[str] = set()
        self.accounted: dict[str, QueueEntry | None] = {}
        """What ``sacct`` said of jobs no longer in the queue (asked once each)."""
        self.asked: dict[str, tuple[float, QueueEntry]] = {}
        """What ``squeue -j`` said of a job when asked directly, and when (newer than the shared view)."""
        self.active_since: dict[str, float] = {}
        """When this owner first saw each job with its nodes (a task silent long after that could not start)."""
        self.requeued: tuple[str, str] | None = None
        """The job SLURM put back into its queue, and why: the next attempt is its next run, not a new job."""

    # -- the scheduler, through the login node's agent ----------------------------------------------

    async def ask(self, argv: list[str], env: dict[str, str] | None = None, *, in_run_dir: bool = False,
                  timeout_s: float = 60.0) -> tuple[int | None, str, str]:
        body = json.dumps(env).encode("utf-8") if env else b""
        header, _ = await self.links[0].call("slurm", body, argv=argv, in_run_dir=in_run_dir, timeout=timeout_s)
        return header.get("exit_status"), header.get("stdout", ""), header.get("stderr", "")

    # -- planning and starting ----------------------------------------------------------------------

    def render(self) -> str:
        return render_slurm(self.plan, self.python_of(self.plan.nodes[0]))

    async def locate(self) -> RunPlan:
        return self.plan  # node 0's address is known only once the job has its nodes

    async def claim_port(self, port: int) -> PortClaim:
        return PortClaim(True)  # chosen on the first node of each job (see the batch script)

    async def prepare(self) -> None:
        from launcher.backends.bundle import agent_zip

        await super().prepare()
        await self.links[0].call("write", agent_zip()[0], name="agent.zip")

    async def start(self, secrets: dict[str, str], attempt: int) -> None:
        if self.requeued is not None:  # SLURM runs the job again itself: that run is this attempt
            job_id, self.requeued = self.requeued[0], None
            await self._follow_job(attempt, job_id)
            return
        plan = self.plan
        spec = self.job_spec(plan.nodes[0], {}, attempt)  # the secrets go to sbatch's environment only
        spec.update(secret_names=sorted(secrets), builtin_trainer=plan.uses_builtin_trainer,
                    port_from_job=plan.workload.compute.master_port is None, rendezvous_port=None)
        if plan.uses_builtin_trainer:
            spec["env"] = {**spec["env"], CHECKPOINT_SIGNAL_ENV: "1"}
        link = self.links[0]
        await link.call("write", json.dumps(spec).encode("utf-8"), name=job_file(attempt, "json"))
        script = batch_script(plan, attempt, self.python_of(plan.nodes[0]))
        await link.call("write", script.encode("utf-8"), name=job_file(attempt, "sbatch"))
        status, out, err = await self.ask(["sbatch", "--parsable", f"node-0/{job_file(attempt, 'sbatch')}"],
                                          secrets, in_run_dir=True)
        if status != 0 or not out.strip():
            raise NodeError(f"sbatch on {self.login_label} refused the job: {(err or out).strip()[:500]} "
                            f"(fsdp-tui doctor checks the partition, account and time limit)", 0)
        await self._follow_job(attempt, out.strip().split(";")[0])

    def _login_said(self, rank: int, state: LinkState, detail: str) -> None:
        """A lost login node is not a lost job: say so while reconnecting."""
        if state == LinkState.RECONNECTING and self.jobs:
            detail += (f"; the SLURM job may still be running: it is followed again when {self.login_label} "
                       f"answers (for up to {self.links[rank].lost_after_s / 60:.0f} min, its time limit)")
        self.watcher(rank, state, detail)

    def _job_lives(self) -> None:
        """From the submission on, the login link is kept trying until the job itself must have ended
        (its time limit): the job runs on without the login, and is followed again, byte for byte from
        job_dir, once the login answers."""
        window = login_window_s(self.plan)
        for link in self.links:
            link.lost_after_s = max(link.lost_after_s, window)

    async def _follow_job(self, attempt: int, job_id: str) -> None:
        self._job_lives()
        self.jobs[attempt] = job_id
        self.attempt, self.submitted_at = attempt, time.time()
        await self.links[0].call("write", json.dumps({str(a): j for a, j in self.jobs.items()}).encode(),
                                 name=JOBS_FILE)

    async def job_id(self) -> str | None:
        """The current attempt's job (after a restart of the owner: from the run directory's record)."""
        if self.attempt is None:
            _, data = await self.links[0].call("read", name=JOBS_FILE, offset=0, limit=1 << 20)
            try:
                self.jobs = {int(a): str(j) for a, j in json.loads(data or b"{}").items()}
            except (ValueError, AttributeError):
                self.jobs = {}
            if not self.jobs:
                return None
            self.attempt = max(self.jobs)
            self._job_lives()
        return self.jobs.get(self.attempt)

    # -- watching -----------------------------------------------------------------------------------

    async def entry(self, job_id: str) -> QueueEntry | None:
        """The job as SLURM knows it: from the queue while SLURM keeps it there (``MinJobAge``), then
        from accounting (``sacct``) where it is on; ``None`` when neither knows it."""
        try:
            taken, entries = await self.queue.snapshot(newer_than=self.submitted_at)
        except QueueError as err:
            raise NodeError(f"{self.login_label}: {err}") from None
        asked = self.asked.get(job_id)
        if asked is not None and asked[0] > taken:
            return asked[1]  # newer than the shared view
        if job_id in entries:
            return entries[job_id]
        if job_id not in self.accounted:
            self.accounted[job_id] = await self._sacct(job_id)
        return self.accounted[job_id]

    async def _sacct(self, job_id: str) -> QueueEntry | None:
        status, out, _ = await self.ask(["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job_id}",
                                         "--format=JobID,State"])
        if status != 0:
            return None  # accounting is off: the node tasks' own records decide
        for line in out.splitlines():
            jid, _, state = line.partition("|")
            if jid == job_id and state:
                return QueueEntry(job_id, state.split()[0])
        return None

    async def status(self, rank: int) -> NodeStatus:
        header, _ = await self.links[rank].call("status")
        node = NodeStatus.from_wire(rank, header)
        job_id = await self.job_id()
        if job_id is None:
            return node
        entry = await self.entry(job_id)
        if entry is not None and entry.active:
            self.active_since.setdefault(f"{job_id}.{self.attempt}", time.monotonic())
        since = self.active_since.get(f"{job_id}.{self.attempt}")
        judged = judge(node, self.attempt, job_id, entry, job_id in self.cancelled,
                       None if since is None else time.monotonic() - since)
        if judged.requeued and node.attempt == self.attempt:
            # The shared queue view may predate the job's start (a job stopped within seconds looks
            # pending again): only squeue asked now, after the node's record, tells a requeue.
            now = await self._job_now(job_id)
            if now is not None:
                self.asked[job_id] = (time.time(), now)
            judged = judge(node, self.attempt, job_id, now, job_id in self.cancelled)
        if judged.requeued:
            if self.requeued is None or self.requeued[0] != job_id:
                self.requeued = (job_id, await self._requeue_words(job_id))
            judged = replace(judged, requeued=f"requeued by SLURM ({self.requeued[1]})")
        return judged

    async def _batch_output(self, job_id: str) -> str:
        """``node-0/slurm-<job>.out``: what ``srun`` and ``slurmstepd`` said (its first 256 KiB: the first
        failure is what counts)."""
        name = f"slurm-{job_id}.out"
        _, data = await self.links[0].call("read", name=name, offset=0, limit=OUTPUT_LIMIT)
        return data.decode("utf-8", "replace")

    async def _requeue_words(self, job_id: str) -> str:
        """Why SLURM requeued the job: the cut-short run's output says it (SLURM empties the file when the
        job runs again), else accounting (``sacct --duplicates``), else SLURM's possible reasons."""
        from launcher.backends.slurm.said import requeue_words

        why = requeue_words(await self._batch_output(job_id))
        if why:
            return why
        status, out, _ = await self.ask(["sacct", "--noheader", "--parsable2", "--duplicates", f"--jobs={job_id}",
                                         "--format=JobID,State,NodeList"])
        if status == 0:
            for line in out.splitlines():
                jid, state, nodes = (line.split("|") + ["", ""])[:3]
                if jid == job_id and state.split()[0] in ("NODE_FAIL", "PREEMPTED", "REQUEUED"):
                    kind = state.split()[0]
                    return {"NODE_FAIL": f"after NODE_FAIL on {nodes}", "PREEMPTED": "preempted",
                            "REQUEUED": "by an operator's scontrol requeue"}[kind]
        return f"after a node failure, a preemption or scontrol requeue; `sacct -D -j {job_id}` says which"

    async def scheduler_cause(self) -> SchedulerCause | None:
        """SLURM's own words on the failed attempt's job: the first task ``srun`` saw die (or the node that
        failed), the node's state in ``sinfo`` and the steps' exit codes in ``sacct`` where it is on."""
        from launcher.backends.slurm.said import (
            batch_output_cause,
            dead_nodes,
            parse_sacct_steps,
            sacct_words,
            this_runs_output,
        )

        job_id = self.jobs.get(self.attempt) if self.attempt is not None else None
        if job_id is None:
            return None
        requeued_run = self.jobs.get(self.attempt - 1) == job_id
        try:
            said = await self._batch_output(job_id)
            cause = batch_output_cause(this_runs_output(said, requeued_run))
            if cause is None:
                if requeued_run and said and not this_runs_output(said, requeued_run):
                    return SchedulerCause(None, self.login_label, "launch",
                                          f"SLURM did not start job {job_id}'s batch script again after the "
                                          f"requeue (slurmd refused the launch: `scontrol show job {job_id}` "
                                          "and slurmd's log on the job's first node say why)")
                return None
            words = cause.words()
            status, out, _ = await self.ask(["sinfo", "--noheader", "-N", "-o", "%N|%T|%E"])
            state = dead_nodes(out).get(cause.node) if status == 0 else None
            if state:
                words += f"; sinfo: {cause.node} {state}"
            status, out, _ = await self.ask(["sacct", "--noheader", "--parsable2", f"--jobs={job_id}",
                                             "--format=JobID,State,ExitCode,NodeList"])
            steps = sacct_words(parse_sacct_steps(out)) if status == 0 else ""
            if steps:
                words += f"; sacct: {steps}"
        except NodeError:
            return None  # the login node is away: the logs' triage stands
        num_nodes = len(self.plan.nodes)
        rank = cause.task if cause.task is not None and cause.task < num_nodes else None
        return SchedulerCause(rank, cause.node or self.login_label, cause.kind, words)

    async def gpus(self, rank: int) -> tuple[GpuSample, ...]:
        """What the node's task sampled (``nvidia-smi`` on the compute node, every few seconds)."""
        _, data = await self.links[rank].call("read", name=GPU_FILE, offset=0, limit=1 << 20)
        try:
            sample = clean_reply(json.loads(data)) if data else {}
        except ValueError:
            return ()
        if time.time() - float(sample.get("at", 0)) > GPU_STALE_S:
            return ()
        return tuple(GpuSample(**g) for g in sample.get("gpus", []))

    async def usage(self, rank: int) -> UsageSample | None:
        """What the node's task sampled of its job (CPU use, RSS, processes, every few seconds)."""
        _, data = await self.links[rank].call("read", name=USAGE_SAMPLE_FILE, offset=0, limit=1 << 16)
        try:
            sample = UsageSample.from_wire(json.loads(data)) if data else None
        except ValueError:
            return None
        if sample is None or time.time() - sample.sampled_at > GPU_STALE_S:
            return None
        return sample

    async def stacks(self, rank: int) -> tuple[StackDump, ...]:
        """Asked of the node's task through the shared directory (``stacks-request``), which answers with
        py-spy's dumps (or the trainer's faulthandler) in ``stacks.json``."""
        token = f"{time.time():.6f}"
        link = self.links[rank]
        await link.call("write", token.encode(), name=STACKS_REQUEST)
        deadline = time.monotonic() + STACKS_WAIT_S
        while time.monotonic() < deadline:
            _, data = await link.call("read", name=STACKS_FILE, offset=0, limit=16 << 20)
            try:
                answer = clean_reply(json.loads(data)) if data else {}
            except ValueError:
                answer = {}  # being replaced: read again
            if answer.get("request") == token:
                return StackDump.many_from_wire(answer.get("stacks"))
            await asyncio.sleep(STOP_POLL_S)
        raise NodeError(f"{self.label(rank)}: its SLURM task did not answer the stack dump within "
                        f"{STACKS_WAIT_S:.0f} s (is the job running?)", rank)

    # -- checks -------------------------------------------------------------------------------------

    async def checkpoint_place(self, output_dir: str) -> CheckpointPlace:
        """A SLURM job's nodes work in one folder of the cluster's shared filesystem (``job_dir``): its
        checkpoints are where the login node lists them (nothing to ask); a bucket URL is a bucket."""
        url = expand_path(output_dir, self._job_env())
        if url_scheme(url):
            return CheckpointPlace("bucket", output_dir, roots=(url,))
        return CheckpointPlace("shared", output_dir, (), (True,) * len(self.plan.nodes),
                               detail="the SLURM job's nodes share the cluster's filesystem")

    async def scheduler_checks(self, quick: bool) -> tuple[SchedulerCheck, ...]:
        """``sbatch --test-only`` of the attempt's script (partition, account, qos, time limit, node and
        GPU counts as the scheduler sees them; nothing runs) and ``sinfo``'s partition, node count and
        MaxTime; a probe job too without ``quick`` (:mod:`.checks`)."""
        from launcher.backends.slurm.checks import full_checks, test_only
        from launcher.backends.slurm.partition import sinfo_checks

        first = await test_only(self)
        if quick:  # test-only accepts a time above MaxTime (EnforcePartLimits=NO): the job would pend forever
            return (first, *await sinfo_checks(self))
        return (first, *await full_checks(self))

    # -- stopping -----------------------------------------------------------------------------------

    async def stop(self, grace_s: float, ranks: tuple[int, ...] | None = None) -> tuple[StopOutcome, ...]:
        """``scancel`` the job (pending or running: a node that fails stops the whole job), then wait until
        SLURM has it out of the queue: its nodes' processes are gone once it leaves COMPLETING."""
        wanted = [n.node_rank for n in self.plan.nodes if ranks is None or n.node_rank in ranks]
        try:
            job_id = await self.job_id()
        except NodeError as err:
            return tuple(StopOutcome(r, self.label(r), False, error=str(err)) for r in wanted)
        if job_id is None:
            return tuple(StopOutcome(r, self.label(r), True, was="absent") for r in wanted)
        self.cancelled.add(job_id)
        try:
            before = await self._job_now(job_id)
            if before is not None and not before.ended:
                status, out, err = await self.ask(["scancel", job_id])
                if status != 0:
                    raise NodeError(f"scancel {job_id} on {self.login_label}: {(err or out).strip()[:300]}")
            after = await self._settled(job_id, grace_s + STOP_EXTRA_S)
        except NodeError as err:
            return tuple(StopOutcome(r, self.label(r), False, error=str(err)) for r in wanted)
        was = "exited" if before is None or before.ended else before.state.lower()
        if after is not None and not after.ended:
            why = (f"SLURM job {job_id} is still {after.state} after {grace_s + STOP_EXTRA_S:.0f} s; "
                   f"check `squeue -j {job_id}` on {self.login_label}")
            return tuple(StopOutcome(r, self.label(r), False, was=was, found=True, error=why) for r in wanted)
        found = before is not None and not before.ended
        return tuple(StopOutcome(r, self.label(r), True, was=was, found=found) for r in wanted)

    async def _job_now(self, job_id: str) -> QueueEntry | None:
        """The job as ``squeue`` says it right now (not the shared view: a stop must not wait for it)."""
        from launcher.backends.slurm.queue import parse_squeue

        status, out, err = await self.ask(["squeue", "--noheader", "--states=all", f"--jobs={job_id}",
                                           "--format=%i|%T|%r|%S|%N"])
        if status != 0:
            if "Invalid job id" in err:
                return None  # long gone from the queue
            raise NodeError(f"squeue on {self.login_label}: {(err or out).strip()[:300]}")
        return parse_squeue(out).get(job_id)

    async def _settled(self, job_id: str, within_s: float) -> QueueEntry | None:
        deadline = time.monotonic() + within_s
        while True:
            entry = await self._job_now(job_id)
            if entry is None or entry.ended or time.monotonic() > deadline:
                return entry
            await asyncio.sleep(STOP_POLL_S)


def create_backend(plan: RunPlan, *, on_link: LinkWatcher | None = None, agent_python: str | None = None) -> SlurmBackend:
    """The registry's entry (:mod:`launcher.backends.registry`): one SLURM job through the login node's agent."""
    return SlurmBackend(plan, on_link=on_link, agent_python=agent_python)
