"""The batch script the SLURM backend submits for the first attempt: :func:`batch_script` itself, not a
second rendering. A workload for SSH hosts or this machine is planned as a SLURM workload first
(``compute.slurm`` with its defaults: the login node is this machine, the cluster's default partition).
The script is the text ``sbatch`` gets, byte for byte, so what it cannot carry is said beside it, never
inside it. Pure."""

from __future__ import annotations

import sys

from launcher.backends.slurm.script import AGENT_ZIP, batch_script, job_file
from launcher.eject.job import ALWAYS_LOST, SWEEP_LOST
from launcher.workload.machines import Slurm
from launcher.workload.plan import RunPlan, build_plan

DEFAULT_PYTHON = "python3"


def as_slurm(plan: RunPlan) -> RunPlan:
    """``plan`` as a SLURM job: the same plan when it is one, else the workload with ``compute.slurm``
    (defaults) in place of ``compute.hosts``."""
    if plan.workload.compute.slurm is not None:
        return plan
    w = plan.workload
    compute = w.compute.model_copy(update={"hosts": [], "master_addr": None, "slurm": Slurm()})
    workload = w.model_copy(update={"compute": compute})
    return build_plan(workload, run_id=plan.run_id, source_file=plan.source_file)


def python_of(plan: RunPlan) -> str:
    """The interpreter the script starts the node task with, as the SLURM backend picks it: on a login
    node that is this machine, ``python3`` means the one fsdp-tui runs under."""
    python = plan.workload.environment.python
    login = plan.nodes[0].host
    local = login is None or login.is_local
    return sys.executable if local and python == DEFAULT_PYTHON else python


def lost(original: RunPlan, plan: RunPlan) -> list[str]:
    w = original.workload
    out = [f"the script runs fsdp-tui's node task ({AGENT_ZIP} slurm-task) with node-0/{job_file(1, 'json')} "
           "beside it, in the run directory the SLURM backend prepares under compute.slurm.job_dir (the code "
           "snapshot, parameters.yaml, the built-in trainer, the agent): `fsdp-tui run` with compute.slurm "
           "ships them and submits this same script",
           "secrets reach the job through sbatch's environment: export each one before sbatch",
           ALWAYS_LOST[1] + " (unless `fsdp-tui run` submits it)"]
    if w.compute.slurm is None:
        where = f"compute.hosts ({', '.join(w.compute.hosts)})" if w.compute.hosts else "this machine"
        out.insert(0, f"{where} become the nodes SLURM gives (compute.slurm with its defaults: login on this "
                      "machine, the default partition); pin nodes with compute.slurm.extra_sbatch: --nodelist=...")
    if w.sweep is not None:
        out.append(SWEEP_LOST)
    if w.max_retries or plan.uses_builtin_trainer:
        out.append("retries and resubmissions after a time limit are submitted by fsdp-tui's run owner: a bare "
                   "sbatch runs one attempt")
    return out


def render(plan: RunPlan) -> tuple[str, list[str]]:
    """The batch script (as the backend writes it) and what it cannot express."""
    slurm_plan = as_slurm(plan)
    return batch_script(slurm_plan, 1, python_of(slurm_plan)), lost(plan, slurm_plan)
