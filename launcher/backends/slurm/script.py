"""The batch script of one attempt, and the dry-run text around it. Pure.

The script holds no secret and no absolute path of the run: ``sbatch`` runs in the run directory on the
shared filesystem, so the job starts there on every node and everything is named relative to it.
"""

from __future__ import annotations

import re
import shlex

from launcher.workload.machines import Slurm, sbatch_value_problem
from launcher.workload.plan import RunPlan, render_plan
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


def render_slurm(plan: RunPlan, python: str) -> str:
    """The dry-run text: the nodes as SLURM will start them, the batch script, and what goes where."""
    s = slurm_of(plan)
    run_dir = f"{plan.node_root}/{plan.run_id}"
    login = s.login if s.login != "local" else "this machine (the login node)"
    shipped = ["parameters.yaml"]
    if plan.code_root is not None:
        shipped.append(f"code/ (snapshot of {plan.code_root})")
    if plan.uses_builtin_trainer:
        shipped.append("pkg/trainer/ (the built-in trainer)")
    text = render_plan(plan)
    if not plan.workload.compute.master_port:  # each job picks its own port (see the batch script)
        text = re.sub(rf"(MASTER_PORT=|--master_port[= ]|rendezvous \S+:){plan.master_port}\b",
                      lambda m: f"{m.group(1)}{JOB_PORT}", text)
    text += "\n".join([
        "",
        f"SLURM: submitted through {login} with `sbatch --parsable node-0/{job_file(1, 'sbatch')}` in {run_dir}",
        f"  shipped to every node-<rank>/ there: {', '.join(shipped)}; node-0/agent.zip (the node task)",
        "  NODE_RANK comes from SLURM_NODEID, MASTER_ADDR is the first host of SLURM_JOB_NODELIST"
        + ("" if plan.workload.compute.master_port else ", MASTER_PORT is 20000 + job id mod 20000"),
        "  every node works in node-0/ (one folder on the shared filesystem: a relative output_dir is shared)",
        "  secrets reach the job through sbatch's environment, never this script",
        "",
        f"batch script (node-0/{job_file(1, 'sbatch')}):",
        *("  " + line for line in batch_script(plan, 1, python).rstrip("\n").splitlines()),
    ])
    return text + "\n"
