"""The engines a workload can be ejected to, by name, and the one call that renders it. Pure."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal

from launcher.workload.plan import RunPlan

Target = Literal["kubeflow", "jobset", "skypilot", "sbatch"]
TARGETS: dict[str, str] = {
    "kubeflow": "a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1)",
    "jobset": "a Kubernetes JobSet (jobset.x-k8s.io/v1alpha2)",
    "skypilot": "a SkyPilot task YAML",
    "sbatch": "the batch script the SLURM backend submits",
}


@dataclass(frozen=True)
class Ejected:
    """A workload as another engine takes it."""

    target: str
    text: str
    """What the engine reads: a YAML manifest (with ``#`` lines on what does not carry over) or the
    batch script exactly as submitted."""
    lost: tuple[str, ...]
    """What the engine cannot express of the workload, one sentence each."""


def eject(plan: RunPlan, target: Target) -> Ejected:
    """``plan`` rendered for ``target``."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
    module = importlib.import_module(f"launcher.eject.{target}")
    if target == "sbatch":
        text, lost = module.render(plan)
    else:
        from launcher.eject.job import job_of

        text, lost = module.render(job_of(plan))
    return Ejected(target, text, tuple(lost))
