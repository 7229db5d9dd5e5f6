"""The backends by name, each loaded only when a run needs it: the protocol (:mod:`launcher.backends.base`)
knows no implementation, and asking for one backend never imports another's code.

Add a backend: a folder (or module) under ``launcher/backends/`` with a class that satisfies
:class:`~launcher.backends.base.Backend` and a module-level ``create_backend(plan, *, on_link,
agent_python)``, one line in :data:`BACKENDS`, and the rule that picks it in :func:`backend_name`.
"""

from __future__ import annotations

import importlib

from launcher.backends.base import Backend, CheckpointFiles, ExportResult, LinkWatcher, SchedulerCheck
from launcher.workload.plan import RunPlan

BACKENDS: dict[str, str] = {
    "agents": "launcher.backends.fleet",
    "slurm": "launcher.backends.slurm.backend",
}
"""Backend name -> the module that holds its ``create_backend`` (an agent per node over a local pipe or
SSH; a SLURM job through its login node)."""


def backend_name(plan: RunPlan) -> str:
    """Which backend reaches ``plan``'s nodes: the workload's ``compute.slurm`` section asks for SLURM."""
    return "slurm" if plan.workload.compute.slurm is not None else "agents"


def backend_for(plan: RunPlan, *, on_link: LinkWatcher | None = None, agent_python: str | None = None) -> Backend:
    """The backend that reaches ``plan``'s nodes, its module imported now.
    ``agent_python``: start the agents with that interpreter instead of the workload's (the doctor's
    fallback when the workload's does not run)."""
    module = importlib.import_module(BACKENDS[backend_name(plan)])
    return module.create_backend(plan, on_link=on_link, agent_python=agent_python)


def ssh_config_check(plan: RunPlan, rank: int) -> SchedulerCheck:
    """What ``~/.ssh/config`` resolved to for SSH node ``rank`` (user, address, port, keys, jump chain,
    known-hosts file, keepalives) beside what ``ssh -G`` says, differences flagged: the doctor's SSH report.
    Blocking (it runs ``ssh -G``): call it from a thread."""
    from launcher.backends.ssh.report import ssh_config_check as check

    node = plan.nodes[rank]
    if node.host is None:
        raise ValueError(f"node {rank} is this machine: it has no SSH config to report")
    return check(plan, node.host, node.host_display)


def here_checkpoint_files() -> CheckpointFiles:
    """This machine's checkpoint files (a gather's holder with ``gather_to: here``)."""
    from launcher.backends.ckpt_files import HereCheckpointFiles

    return HereCheckpointFiles()


def export_here_checkpoint(root: str, name: str, copy_to: str | None, merged: bool = False) -> ExportResult:
    """A checkpoint kept on this machine (``gather_to: here``) exported here, with this interpreter's torch;
    with ``copy_to``, the folder copied there too. Blocking."""
    from launcher.backends.ckpt_files import export_here

    return export_here(root, name, copy_to, merged)
