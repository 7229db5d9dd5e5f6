"""The one entry from a workload file to a plan: ``run``, ``doctor``, the app and the editor all call
:func:`plan_file`, so each shows the same node directories, environment and commands."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.paths import new_run_id
from launcher.workload.hosts import parse_host
from launcher.workload.model import Workload
from launcher.workload.overrides import Override
from launcher.workload.plan import RunPlan, build_plan
from launcher.workload.problems import Problem
from launcher.workload.validate import ValidationResult, validate_file, validate_text

LOCAL_NODES_DIR = "nodes"
"""Runs on this machine keep their node directories in the data dir, beside the run's record."""


@dataclass(frozen=True)
class Planned:
    """A validated workload and, when it has no error, its plan."""

    result: ValidationResult
    plan: RunPlan | None

    @property
    def problems(self) -> list[Problem]:
        return self.result.problems


def node_root_for(workload: Workload, home: Path) -> str:
    """Where the nodes keep run directories: ``<ssh.remote_root>/runs`` on SSH hosts, the data dir's
    ``nodes/`` for a run on this machine, ``compute.slurm.job_dir`` (shared by the login and compute
    nodes) for a SLURM job."""
    if workload.compute.slurm is not None:
        return workload.compute.slurm.job_dir.rstrip("/")
    if not all(parse_host(h).is_local for h in workload.compute.hosts):
        return f"{workload.ssh.remote_root.rstrip('/')}/runs"
    return str(Path(home) / LOCAL_NODES_DIR)


def plan_file(path: Path, overrides: Sequence[Override] = (), *, home: Path, run_id: str | None = None,
              text: str | None = None) -> Planned:
    """Validate ``path`` (or ``text``, the editor's unsaved buffer for it) with ``--set`` overrides and
    plan it. ``run_id`` defaults to a new one; nothing on any node is touched."""
    path = Path(path)
    if text is None:
        result = validate_file(path, overrides)
    else:
        result = validate_text(text, str(path), overrides, base_dir=path.parent)
    if result.workload is None:
        return Planned(result, None)
    workload = result.workload
    plan = build_plan(workload, run_id=run_id or new_run_id(workload.experiment_name),
                      source_file=path.resolve(), node_root=node_root_for(workload, home))
    return Planned(result, plan)
