"""What the SLURM backend checks before a run is submitted: the quick check a launch makes (``sbatch
--test-only``), and the doctor's fuller set."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from launcher.backends.base import SchedulerCheck
from launcher.backends.slurm.script import sbatch_options

if TYPE_CHECKING:
    from launcher.backends.slurm.login import LoginNode

UNREACHABLE_CONTROLLER = ("configuration source", "Unable to contact slurm controller",
                          "not found on this node's PATH", "Communication connection failure")
"""What sbatch says when it cannot ask any controller (as opposed to refusing the job)."""


async def test_only(login: LoginNode) -> SchedulerCheck:
    """``sbatch --test-only`` with the run's options: SLURM says whether it would take the job (the
    partition, account, qos, time limit, node and GPU counts), without queueing anything."""
    opts = sbatch_options(login.plan)
    opts = [o for o in opts if not o.startswith(("--output=", "--signal="))]
    status, out, err = await login.ask(["sbatch", "--test-only", *opts, "--wrap=true"])
    said = (err or out).strip().splitlines()
    if status == 0:
        return SchedulerCheck("sbatch --test-only", "ok", said[-1] if said else "the job would be accepted")
    text = " ".join(said)
    if status == 127 or any(w in text for w in UNREACHABLE_CONTROLLER):
        return SchedulerCheck("sbatch --test-only", "error", f"SLURM's commands on {login.label} cannot "
                              f"reach a SLURM controller: {text[:300]}",
                              f"check that `sinfo` works on {login.label} as this user (SLURM_CONF, "
                              "munge, the controller's address): compute.slurm.login must be a login node")
    down = await _down_nodes(login)
    return SchedulerCheck("sbatch --test-only", "error", f"SLURM on {login.label} would refuse the job: "
                          + " ".join(said)[:400] + (f" (sinfo: {down})" if down else ""),
                          "check compute.slurm (partition, account, qos, time, nodes, gpus_per_node) against "
                          "`sinfo` and `sacctmgr show assoc user=$USER`; try by hand: sbatch --test-only "
                          + shlex.join(opts) + " --wrap=true")


async def _down_nodes(login: LoginNode) -> str:
    """The nodes ``sinfo`` says are down or not responding: often why a job that fits is refused."""
    from launcher.backends.slurm.said import dead_nodes

    status, out, _ = await login.ask(["sinfo", "--noheader", "-N", "-o", "%N|%T|%E"])
    found = dead_nodes(out) if status == 0 else {}
    return "; ".join(f"{name} {state}" for name, state in sorted(found.items()))


async def full_checks(login: LoginNode) -> tuple[SchedulerCheck, ...]:
    """After ``test_only``: the partition, its nodes, GPUs and time limit from ``sinfo``
    (:mod:`.partition`), then a short probe job on the compute nodes (:mod:`.probe_job`)."""
    from launcher.backends.slurm.partition import sinfo_checks
    from launcher.backends.slurm.probe_job import safe_probe_checks

    return (*await sinfo_checks(login), *await safe_probe_checks(login))
