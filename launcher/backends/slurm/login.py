"""The way to a SLURM cluster: its login node's agent, SLURM's commands run there (``sbatch``, ``squeue``,
``scancel``, ``sacct``, ``sinfo``, ``srun``), and the job's own files in the run's folder on the filesystem
the login and compute nodes share.
"""

from __future__ import annotations

import json

from launcher.backends.fleet import AgentFleet
from launcher.backends.replies import ScriptRun
from launcher.backends.slurm.queue import QueueView
from launcher.backends.slurm.script import slurm_of
from launcher.paths import data_home
from launcher.workload.plan import RunPlan
from launcher.workload.slurm import time_minutes, time_option

STOP_EXTRA_S = 60.0
"""How long past the grace a cancelled job may stay COMPLETING (SLURM's KillWait, slow nodes)."""
NO_LIMIT_WINDOW_S = 86400.0
"""How long a lost login node is waited for when the job's time limit is the partition's (unknown here)."""


def login_window_s(plan: RunPlan) -> float:
    """How long the login node may stay away once a job runs: the job's own time limit (it may run that
    long without us), never less than ``ssh.lost_after_s``."""
    limit = time_option(slurm_of(plan), plan.workload.timeout_minutes)
    job_s = time_minutes(limit) * 60 + STOP_EXTRA_S if limit else NO_LIMIT_WINDOW_S
    return max(plan.workload.ssh.lost_after_s, job_s)


class LoginNode:
    """Owns the way to the cluster: SLURM's commands run by the login node's agent (node 0's link of the
    run's fleet, working in the run's ``node-0`` folder), the job's files kept in that folder, and how long
    the links may stay away once a job runs. Every node's link reaches this same login node (each in its
    node's folder): the fleet holds the links, this holds what only the login node is asked."""

    def __init__(self, fleet: AgentFleet) -> None:
        self.fleet = fleet
        host = fleet.plan.nodes[0].host
        self.label = host.display if host is not None else "this machine"
        """The login node in words (``alice@login.cluster``), for every message about the cluster."""
        self.queue = QueueView(host.alias if host is not None else "local", self.ask, data_home() / "slurm")
        """``squeue``'s view of the queue, shared by every run this machine follows on this login node."""

    @property
    def plan(self) -> RunPlan:
        return self.fleet.plan

    async def ask(self, argv: list[str], env: dict[str, str] | None = None, *, in_run_dir: bool = False,
                  timeout_s: float = 60.0) -> tuple[int | None, str, str]:
        """A SLURM command on the login node: its exit status (``None``: no answer within ``timeout_s``),
        stdout and stderr. ``env`` travels in the request's body (it may hold secrets, never an argv);
        ``in_run_dir``: run in the run's folder (``sbatch`` of the attempt's script)."""
        body = json.dumps(env).encode("utf-8") if env else b""
        header, _ = await self.fleet.links[0].call("slurm", body, argv=argv, in_run_dir=in_run_dir,
                                                   timeout=timeout_s)
        status, out, err = header.get("exit_status"), header.get("stdout"), header.get("stderr")
        return (status if isinstance(status, int) and not isinstance(status, bool) else None,
                out if isinstance(out, str) else "", err if isinstance(err, str) else "")

    async def write(self, name: str, data: bytes) -> None:
        """A file of the job in the run's ``node-0`` folder (the batch script, its spec, the jobs' record)."""
        await self.fleet.links[0].call("write", data, name=name)

    async def read(self, name: str, limit: int) -> bytes:
        """The start of a file in the run's ``node-0`` folder (up to ``limit`` bytes; empty when absent)."""
        _, data = await self.fleet.links[0].call("read", name=name, offset=0, limit=limit)
        return data

    async def run_script(self, python: str, script: str, timeout_s: float) -> ScriptRun:
        """A short script on the login node itself (the doctor's probe folder made and listed)."""
        return await self.fleet.run_script(0, python, script, timeout_s)

    def keep_trying(self) -> None:
        """From a submission on, every link to the login node is kept trying until the job itself must have
        ended (its time limit): the job runs on without the login node, and is followed again, byte for
        byte from ``job_dir``, once the login node answers."""
        window = login_window_s(self.plan)
        for link in self.fleet.links:
            link.lost_after_s = max(link.lost_after_s, window)
