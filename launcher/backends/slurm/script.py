"""The batch script of one attempt, and the dry run around it. Pure.

The script holds no secret and no absolute path of the run: ``sbatch`` runs in the run directory on the
shared filesystem, so the job starts there on every node and everything is named relative to it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

from launcher.workload.dry_run import DryRun, SlurmDryRun, dry_run_of
from launcher.workload.machines import Slurm, sbatch_value_problem
from launcher.workload.plan import RunPlan
from launcher.workload.slurm import sbatch_option, time_option

AGENT_ZIP = "node-0/agent.zip"
JOB_PORT = "<20000+jobid%20000>"
"""The rendezvous port as the dry run shows it: each job's own, from its id."""


def job_file(attempt: int, suffix: str) -> str:
    """``job-<attempt>.<suffix>`` in node 0's directory (``json``: the job spec, ``sbatch``: the script)."""
    return f"job-{attempt}.{suffix}"


def slurm_of(plan: RunPlan) -> Slurm:
    """A SLURM run's ``compute.slurm`` (only such a plan reaches the SLURM backend and its script)."""
    s = plan.workload.compute.slurm
    if s is None:
        raise ValueError(f"{plan.run_id}: not a SLURM run (compute.slurm is unset)")
    return s


def placement_options(plan: RunPlan) -> list[str]:
    """Where a job of this run may go: partition, account, qos, constraint, GPUs per node (the batch job
    and the doctor's probe job alike)."""
    s = slurm_of(plan)
    topo = plan.topology
    opts = []
    for name, value in (("partition", s.partition), ("account", s.account), ("qos", s.qos),
                        ("constraint", s.constraint)):
        if value:
            why = sbatch_value_problem(value)
            if why:  # validation refuses it first; the one place that writes the line refuses again
                raise ValueError(f"compute.slurm.{name}: {why}")
            opts.append(f"--{name}={value}")
    gpus = s.gpus_per_node or (topo.procs_per_node if topo.kind == "gpu" else None)
    if gpus:
        opts.append(f"--gpus-per-node={gpus}")
    return opts


def sbatch_options(plan: RunPlan) -> list[str]:
    s = slurm_of(plan)
    topo = plan.topology
    opts = [f"--job-name=fsdp-tui-{plan.run_id}", f"--nodes={topo.num_nodes}", "--ntasks-per-node=1",
            "--output=node-0/slurm-%j.out", "--requeue" if s.requeue else "--no-requeue"]
    if plan.uses_builtin_trainer:
        opts.append(f"--signal=B:USR1@{s.signal_lead_s}")
    limit = time_option(s, plan.workload.timeout_minutes)
    if limit:
        opts.append(f"--time={limit}")
    opts += placement_options(plan)
    if s.exclusive:
        opts.append("--exclusive")
    if s.exclude:
        opts.append(f"--exclude={','.join(s.exclude)}")
    opts += [sbatch_option(line) for line in s.extra_sbatch]
    return opts


def batch_script(plan: RunPlan, attempt: int, python: str) -> str:
    """What ``sbatch`` gets for ``attempt``: one task per node runs the node agent's ``slurm-task``."""
    retries = plan.workload.max_retries
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {opt}" for opt in sbatch_options(plan)]
    lines += [
        f"# fsdp-tui run {plan.run_id}, attempt {attempt}"
        + (f" (retries: {retries})" if retries else "") + ".",
        "# Submitted from the run directory on the shared filesystem; each node's task starts the workload",
        "# with the node contract's environment and records it in node-<rank>/ here.",
        "set -u",
    ]
    if plan.uses_builtin_trainer:
        lines += ["# Near the time limit: the built-in trainer saves a checkpoint and stops; the next job resumes.",
                  f"trap 'touch checkpoint-now.{attempt}' USR1"]
    lines += [
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 {shlex.quote(python)} {AGENT_ZIP} slurm-task {attempt} &",
        "task=$!",
        "while true; do",
        '  wait "$task"; code=$?',
        '  kill -0 "$task" 2>/dev/null || break',
        "done",
        'exit "$code"',
    ]
    return "\n".join(lines) + "\n"


def slurm_dry_run(plan: RunPlan, python: str) -> DryRun:
    """The dry run: the nodes as SLURM will start them, the batch script, and what goes where."""
    s = slurm_of(plan)
    dry = dry_run_of(plan)
    per_job = not plan.workload.compute.master_port
    if per_job:  # each job picks its own port (see the batch script): shown as the job computes it
        dry = replace(dry, master_port=JOB_PORT, nodes=tuple(
            replace(node, environment=tuple(_job_port(name, value, plan.master_port) for name, value in node.environment),
                    command=tuple(_port_shown(line, plan.master_port) for line in node.command))
            for node in dry.nodes))
    return replace(dry, slurm=SlurmDryRun(
        login=s.login if s.login != "local" else None, run_dir=f"{plan.node_root}/{plan.run_id}",
        script_file=f"node-0/{job_file(1, 'sbatch')}", agent_file=AGENT_ZIP, port_per_job=per_job,
        script=batch_script(plan, 1, python)))


def _port_shown(text: str, port: int) -> str:
    """``text`` (an assignment or a command line) with the plan's rendezvous port as each job computes it."""
    return re.sub(rf"(MASTER_PORT=|--master_port[= ]){port}\b", lambda m: f"{m.group(1)}{JOB_PORT}", text)


def _job_port(name: str, value: str, port: int) -> tuple[str, str]:
    return name, _port_shown(f"{name}={value}", port)[len(name) + 1:]
