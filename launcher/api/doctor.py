"""The doctor: every node of a workload checked at once before a launch (SSH with a verified host key,
Python, torch and the trainer's packages, GPUs, disk, the rendezvous address and port; for SLURM the login
node, the partition and a probe job), judged in words with what to do; and a probe run that times the
workload's first steps to estimate the whole run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from launcher.doctor.judge import Check, DoctorReport, NodeReport
from launcher.runs.probe import PROBE_BUDGET_S, PROBE_STEPS, ProbeResult
from launcher.workload.plan import RunPlan

__all__ = ["PROBE_BUDGET_S", "PROBE_STEPS", "Check", "Doctor", "DoctorReport", "NodeReport", "ProbeResult"]


class Doctor:
    """Checks of one data dir's workloads (the data dir holds the secrets and the probe runs)."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)

    async def diagnose(self, plan: RunPlan) -> DoctorReport:
        """Probe every node of ``plan`` at once and judge each (seconds to minutes: a node that does not
        answer is judged when its connect times out); the secrets are looked up here too."""
        from launcher.doctor.diagnose import diagnose

        return await diagnose(plan, run_root=plan.node_root, home=self.home)

    async def probe(self, plan: RunPlan, *, steps: int = PROBE_STEPS, budget_s: float = PROBE_BUDGET_S,
                    on_progress: Callable[[int, float], None] | None = None) -> ProbeResult:
        """Time ``plan``'s first ``steps`` steps on its nodes in a probe run (cancelled then, or after
        ``budget_s``) and estimate the whole run from them; ``on_progress(steps, elapsed_s)`` as it goes."""
        from launcher.runs.probe import run_probe

        return await run_probe(self.home, plan, steps=steps, budget_s=budget_s, on_progress=on_progress)
