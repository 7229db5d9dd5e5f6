"""A run's SLURM jobs as the scheduler knows them: submitted with ``sbatch``, followed through ``squeue``
(and ``sacct`` where accounting is on), cancelled with ``scancel``, one job per attempt; each node's own
record judged against the job's place in the queue (:func:`~launcher.backends.slurm.verdict.judge`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import replace

from launcher.backends.base import NodeError, NodeStatus, StopOutcome
from launcher.backends.slurm.login import STOP_EXTRA_S, LoginNode
from launcher.backends.slurm.queue import QueueEntry, QueueError
from launcher.backends.slurm.script import job_file
from launcher.backends.slurm.verdict import judge

JOBS_FILE = "jobs.json"
STOP_POLL_S = 0.5


class SlurmJob:
    """Owns the run's jobs: the job of each attempt (recorded in the run's folder, so an owner that
    restarts follows the same job), what ``squeue`` and ``sacct`` said of them, the jobs cancelled from
    here, and a job SLURM put back into its queue (its next run is the next attempt)."""

    def __init__(self, login: LoginNode) -> None:
        self.login = login
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

    # -- submitting ---------------------------------------------------------------------------------

    async def submit(self, attempt: int, spec: dict, script: str, secrets: dict[str, str]) -> None:
        """``attempt``'s job: its spec and batch script written in the run's folder, ``sbatch`` with the
        secrets in its environment only. A job SLURM requeued is not submitted again: its next run is
        this attempt."""
        if self.requeued is not None:
            job_id, self.requeued = self.requeued[0], None
            await self._follow(attempt, job_id)
            return
        await self.login.write(job_file(attempt, "json"), json.dumps(spec).encode("utf-8"))
        await self.login.write(job_file(attempt, "sbatch"), script.encode("utf-8"))
        status, out, err = await self.login.ask(["sbatch", "--parsable", f"node-0/{job_file(attempt, 'sbatch')}"],
                                                secrets, in_run_dir=True)
        if status != 0 or not out.strip():
            raise NodeError(f"sbatch on {self.login.label} refused the job: {(err or out).strip()[:500]} "
                            f"(fsdp-tui doctor checks the partition, account and time limit)", 0)
        await self._follow(attempt, out.strip().split(";")[0])

    async def _follow(self, attempt: int, job_id: str) -> None:
        self.login.keep_trying()
        self.jobs[attempt] = job_id
        self.attempt, self.submitted_at = attempt, time.time()
        await self.login.write(JOBS_FILE, json.dumps({str(a): j for a, j in self.jobs.items()}).encode())

    async def job_id(self) -> str | None:
        """The current attempt's job (after a restart of the owner: from the run directory's record)."""
        if self.attempt is None:
            data = await self.login.read(JOBS_FILE, 1 << 20)
            try:
                self.jobs = {int(a): str(j) for a, j in json.loads(data or b"{}").items()}
            except (ValueError, AttributeError):
                self.jobs = {}
            if not self.jobs:
                return None
            self.attempt = max(self.jobs)
            self.login.keep_trying()
        return self.jobs.get(self.attempt)

    def current(self) -> tuple[int, str] | None:
        """The attempt this owner follows and its job, once there is one."""
        job_id = self.jobs.get(self.attempt) if self.attempt is not None else None
        return None if self.attempt is None or job_id is None else (self.attempt, job_id)

    # -- watching -----------------------------------------------------------------------------------

    async def entry(self, job_id: str) -> QueueEntry | None:
        """The job as SLURM knows it: from the queue while SLURM keeps it there (``MinJobAge``), then
        from accounting (``sacct``) where it is on; ``None`` when neither knows it."""
        try:
            taken, entries = await self.login.queue.snapshot(newer_than=self.submitted_at)
        except QueueError as err:
            raise NodeError(f"{self.login.label}: {err}") from None
        asked = self.asked.get(job_id)
        if asked is not None and asked[0] > taken:
            return asked[1]  # newer than the shared view
        if job_id in entries:
            return entries[job_id]
        if job_id not in self.accounted:
            self.accounted[job_id] = await self._sacct(job_id)
        return self.accounted[job_id]

    async def _sacct(self, job_id: str) -> QueueEntry | None:
        status, out, _ = await self.login.ask(["sacct", "--noheader", "--parsable2", "--allocations",
                                               f"--jobs={job_id}", "--format=JobID,State"])
        if status != 0:
            return None  # accounting is off: the node tasks' own records decide
        for line in out.splitlines():
            jid, _, state = line.partition("|")
            if jid == job_id and state:
                return QueueEntry(job_id, state.split()[0])
        return None

    async def judged(self, node: NodeStatus) -> NodeStatus:
        """A node's own record judged against its job's place in SLURM's queue."""
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
            now = await self.now(job_id)
            if now is not None:
                self.asked[job_id] = (time.time(), now)
            judged = judge(node, self.attempt, job_id, now, job_id in self.cancelled)
        if judged.requeued:
            if self.requeued is None or self.requeued[0] != job_id:
                from launcher.backends.slurm.cause import why_requeued

                self.requeued = (job_id, await why_requeued(self.login, job_id))
            judged = replace(judged, requeued=f"requeued by SLURM ({self.requeued[1]})")
        return judged

    async def now(self, job_id: str) -> QueueEntry | None:
        """The job as ``squeue`` says it right now (not the shared view: a stop must not wait for it)."""
        from launcher.backends.slurm.queue import parse_squeue

        status, out, err = await self.login.ask(["squeue", "--noheader", "--states=all", f"--jobs={job_id}",
                                                 "--format=%i|%T|%r|%S|%N"])
        if status != 0:
            if "Invalid job id" in err:
                return None  # long gone from the queue
            raise NodeError(f"squeue on {self.login.label}: {(err or out).strip()[:300]}")
        return parse_squeue(out).get(job_id)

    # -- stopping -----------------------------------------------------------------------------------

    async def stop(self, grace_s: float, ranks: list[int], label: Callable[[int], str]) -> tuple[StopOutcome, ...]:
        """``scancel`` the job (pending or running: a node that fails stops the whole job), then wait until
        SLURM has it out of the queue: its nodes' processes are gone once it leaves COMPLETING. Every
        node of ``ranks`` hears the same outcome (``label`` names each)."""
        try:
            job_id = await self.job_id()
        except NodeError as err:
            return tuple(StopOutcome(r, label(r), False, error=str(err)) for r in ranks)
        if job_id is None:
            return tuple(StopOutcome(r, label(r), True, was="absent") for r in ranks)
        self.cancelled.add(job_id)
        try:
            before = await self.now(job_id)
            if before is not None and not before.ended:
                status, out, err = await self.login.ask(["scancel", job_id])
                if status != 0:
                    raise NodeError(f"scancel {job_id} on {self.login.label}: {(err or out).strip()[:300]}")
            after = await self._settled(job_id, grace_s + STOP_EXTRA_S)
        except NodeError as err:
            return tuple(StopOutcome(r, label(r), False, error=str(err)) for r in ranks)
        was = "exited" if before is None or before.ended else before.state.lower()
        if after is not None and not after.ended:
            why = (f"SLURM job {job_id} is still {after.state} after {grace_s + STOP_EXTRA_S:.0f} s; "
                   f"check `squeue -j {job_id}` on {self.login.label}")
            return tuple(StopOutcome(r, label(r), False, was=was, found=True, error=why) for r in ranks)
        found = before is not None and not before.ended
        return tuple(StopOutcome(r, label(r), True, was=was, found=found) for r in ranks)

    async def _settled(self, job_id: str, within_s: float) -> QueueEntry | None:
        deadline = time.monotonic() + within_s
        while True:
            entry = await self.now(job_id)
            if entry is None or entry.ended or time.monotonic() > deadline:
                return entry
            await asyncio.sleep(STOP_POLL_S)
