"""The doctor: every node of a workload checked at once before a launch (SSH with a verified host key,
Python, torch and the trainer's packages, GPUs, disk, the rendezvous address and port; for SLURM the login
node, the partition and a probe job), judged in words with what to do; and a probe run that times the
workload's first steps to estimate the whole run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.api._lazy import lazy_names

if TYPE_CHECKING:
    from launcher.doctor.judge import Check, DoctorReport, NodeReport
    from launcher.runs.probe import PROBE_BUDGET_S, PROBE_STEPS, ProbeResult
    from launcher.workload.plan import RunPlan

__getattr__ = lazy_names(__name__, {
    "launcher.doctor.judge": ("Check", "DoctorReport", "NodeReport"),
    "launcher.runs.probe": ("PROBE_BUDGET_S", "PROBE_STEPS", "ProbeResult"),
})

__all__ = ["PROBE_BUDGET_S", "PROBE_STEPS", "Check", "Doctor", "DoctorReport", "NodeReport", "ProbeResult"]


class Doctor:
    """Checks of one data dir's workloads (the data dir holds the secrets and the probe runs)."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)

    async def diagnose(self, plan: RunPlan) -> DoctorReport:
        """Probe every node of ``plan`` at once and judge each (seconds to minutes: a node that does not
        answer is judged when its connect times out); the secrets are looked up here too, and the hosts
        and spares this data dir has quarantined are said."""
        from launcher.doctor.diagnose import diagnose

        return with_quarantine(await diagnose(plan, run_root=plan.node_root, home=self.home), plan, self.home)


    async def probe(self, plan: RunPlan, *, steps: int | None = None, budget_s: float | None = None,
                    on_progress: Callable[[int, float], None] | None = None) -> ProbeResult:
        """Time ``plan``'s first ``steps`` steps (default :data:`PROBE_STEPS`) on its nodes in a probe run
        (cancelled then, or after ``budget_s``, default :data:`PROBE_BUDGET_S`) and estimate the whole run
        from them; ``on_progress(steps, elapsed_s)`` as it goes."""
        from launcher.runs.probe import PROBE_BUDGET_S, PROBE_STEPS, run_probe

        return await run_probe(self.home, plan, steps=PROBE_STEPS if steps is None else steps,
                               budget_s=PROBE_BUDGET_S if budget_s is None else budget_s, on_progress=on_progress)


def with_quarantine(report: DoctorReport, plan: RunPlan, home: Path) -> DoctorReport:
    """``report`` with an error on each node whose host is quarantined here, and node 0's line on the spares
    (how many, which are quarantined)."""
    from dataclasses import replace

    from launcher.doctor.judge import Check
    from launcher.runs.core.quarantine import quarantined

    held = quarantined(home)
    nodes = list(report.nodes)
    for i, node in enumerate(nodes):
        host = plan.nodes[node.node_rank].host_display if node.node_rank < len(plan.nodes) else ""
        if host in held:
            nodes[i] = replace(node, checks=(*node.checks, Check(
                "quarantine", "error", held[host].words(),
                f"fsdp-tui quarantine lift {host} once the machine is fixed, or take it out of compute.hosts")))
    spares = plan.workload.compute.spares
    if spares and nodes:
        out = [s for s in spares if s in held]
        detail = (f"{len(spares)} spare{'s' if len(spares) != 1 else ''} ({', '.join(spares)})"
                  + (f"; quarantined, never used: {', '.join(held[s].words() for s in out)}" if out else "")
                  + "; each is checked with the doctor when it is needed")
        check = Check("spares", "warning" if out else "ok", detail,
                      f"fsdp-tui quarantine lift {out[0]}" if out else "")
        nodes[0] = replace(nodes[0], checks=(*nodes[0].checks, check))
    return replace(report, nodes=tuple(nodes))
