"""The doctor's memory check, purely: the workload's predicted peak per rank (:mod:`launcher.workload.fit`)
against the memory a node reported (its GPUs' from ``nvidia-smi``, else its RAM over its processes)."""

from __future__ import annotations

from launcher.doctor.check import Check
from launcher.doctor.reply import ProbeReply
from launcher.words import plural
from launcher.workload.fit import fit_plan, verdict_of
from launcher.workload.plan import RunPlan
from trainer.wire.fit_advice import Budget

GIB = 2**30


def node_budget(plan: RunPlan, facts: ProbeReply, host: str) -> Budget | None:
    """A rank's memory on this node: its smallest GPU among those the workload uses, or its RAM over the
    workload's processes; ``None`` when the node did not say."""
    procs = plan.topology.procs_per_node
    if plan.topology.kind == "gpu":
        sizes = facts.gpus.memory_mib[:procs]
        if not sizes:
            return None
        name = facts.gpus.names[0] if facts.gpus.names else "GPU"
        return Budget(min(sizes) * 2**20, f"{name} on {host}, nvidia-smi")
    if facts.ram.total_bytes is None:
        return None
    return Budget(facts.ram.total_bytes // max(1, procs), f"{host}'s RAM over {plural(procs, 'process')}")


def memory_check(plan: RunPlan, facts: ProbeReply, host: str) -> Check | None:
    """``memory``: ok when the predicted need fits (with headroom), a warning when it fits only without
    headroom or the node did not report its memory, an error when it needs more than the rank has;
    ``None`` for a command of the workload's own (its model is not known)."""
    fit = fit_plan(plan)
    if isinstance(fit, str):
        return Check("memory", "ok", fit.removeprefix("memory: ")) if plan.uses_builtin_trainer else None
    budget = node_budget(plan, facts, host)
    said = verdict_of(fit, plan, budget)
    head = said.lines()[0].removeprefix("memory: ")
    if budget is None:
        return Check("memory", "warning", f"{head}; {host} did not report its memory",
                     "compare it with the memory of a rank there by hand")
    share = f"{said.need / budget.bytes:.0%} of {budget.bytes / GIB:.1f} GiB ({budget.source})"
    if said.fits:
        return Check("memory", "ok", f"{head}; fits: {share}")
    status = "error" if said.need > budget.bytes else "warning"
    fix = ("try " + "; or ".join(said.tries)) if said.tries else "more ranks, or GPUs with more memory"
    return Check("memory", status, f"{head}; does not fit: {share}", fix)
