"""What SLURM says ended a job, asked on the login node: the batch output's first failure (what ``srun`` and
``slurmstepd`` wrote), the node's state in ``sinfo``, the steps in ``sacct`` where accounting is on, and why
a job was requeued. The words themselves are read by :mod:`~launcher.backends.slurm.said` (pure)."""

from __future__ import annotations

from launcher.backends.base import NodeError, SchedulerCause
from launcher.backends.slurm.login import LoginNode
from launcher.backends.slurm.said import (
    batch_output_cause,
    dead_nodes,
    parse_sacct_steps,
    requeue_words,
    sacct_words,
    this_runs_output,
)

OUTPUT_LIMIT = 256 << 10


async def batch_output(login: LoginNode, job_id: str) -> str:
    """``node-0/slurm-<job>.out``: what ``srun`` and ``slurmstepd`` said (its first 256 KiB: the first
    failure is what counts)."""
    data = await login.read(f"slurm-{job_id}.out", OUTPUT_LIMIT)
    return data.decode("utf-8", "replace")


async def why_requeued(login: LoginNode, job_id: str) -> str:
    """Why SLURM requeued the job: the cut-short run's output says it (SLURM empties the file when the
    job runs again), else accounting (``sacct --duplicates``), else SLURM's possible reasons."""
    why = requeue_words(await batch_output(login, job_id))
    if why:
        return why
    status, out, _ = await login.ask(["sacct", "--noheader", "--parsable2", "--duplicates", f"--jobs={job_id}",
                                      "--format=JobID,State,NodeList"])
    if status == 0:
        for line in out.splitlines():
            jid, state, nodes = (line.split("|") + ["", ""])[:3]
            if jid == job_id and state.split()[0] in ("NODE_FAIL", "PREEMPTED", "REQUEUED"):
                kind = state.split()[0]
                return {"NODE_FAIL": f"after NODE_FAIL on {nodes}", "PREEMPTED": "preempted",
                        "REQUEUED": "by an operator's scontrol requeue"}[kind]
    return f"after a node failure, a preemption or scontrol requeue; `sacct -D -j {job_id}` says which"


async def scheduler_cause(login: LoginNode, job_id: str, requeued_run: bool, num_nodes: int) -> SchedulerCause | None:
    """SLURM's own words on the failed attempt's job: the first task ``srun`` saw die (or the node that
    failed), the node's state in ``sinfo`` and the steps' exit codes in ``sacct`` where it is on.
    ``requeued_run``: the attempt is the job's run after a requeue (its output follows the first run's)."""
    try:
        output = await batch_output(login, job_id)
        cause = batch_output_cause(this_runs_output(output, requeued_run))
        if cause is None:
            if requeued_run and output and not this_runs_output(output, requeued_run):
                return SchedulerCause(None, login.label, "launch",
                                      f"SLURM did not start job {job_id}'s batch script again after the "
                                      f"requeue (slurmd refused the launch: `scontrol show job {job_id}` "
                                      "and slurmd's log on the job's first node say why)")
            return None
        words = cause.words()
        status, out, _ = await login.ask(["sinfo", "--noheader", "-N", "-o", "%N|%T|%E"])
        state = dead_nodes(out).get(cause.node) if status == 0 else None
        if state:
            words += f"; sinfo: {cause.node} {state}"
        status, out, _ = await login.ask(["sacct", "--noheader", "--parsable2", f"--jobs={job_id}",
                                          "--format=JobID,State,ExitCode,NodeList"])
        steps = sacct_words(parse_sacct_steps(out)) if status == 0 else ""
        if steps:
            words += f"; sacct: {steps}"
    except NodeError:
        return None  # the login node is away: the logs' triage stands
    rank = cause.task if cause.task is not None and cause.task < num_nodes else None
    return SchedulerCause(rank, cause.node or login.label, cause.kind, words)
