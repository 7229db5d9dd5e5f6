"""The doctor's cheap checks, run before every launch over the channels the launch already opened:
nothing is imported on the nodes (versions are read from package metadata), so it costs a fraction
of a second per node. A certain failure (a CPU-only torch for a GPU workload, fewer GPUs than
processes, an interpreter that is too old, a run root that cannot be written) stops the launch with
the doctor's own words instead of building venvs and retrying."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from launcher.backends.base import Backend, NodeError
from launcher.doctor.diagnose import parse_probe_output, probe_script
from launcher.doctor.judge import Check, NodeProbe, evaluate, probe_packages

QUICK_TIMEOUT_S = 30.0
SKIPPED = {"reachable", "hostname", "rendezvous"}
"""Checks a launch does itself (it is connected; a taken default port moves to a free one)."""
PACKAGE_CHECKS = {"torch", "transformers", "datasets", "pydantic", "yaml", "peft", "bitsandbytes"}


@dataclass(frozen=True)
class Refusal:
    label: str
    check: Check

    def __str__(self) -> str:
        fix = f" -> {self.check.fix}" if self.check.fix else ""
        return f"{self.label}: {self.check.name}: {self.check.detail}{fix}"


async def preflight(backend: Backend) -> list[Refusal]:
    """Every error the cheap checks find, on every node at once."""
    plan = backend.plan
    if plan.topology.slurm:  # the login node is not where the job runs: ask the scheduler instead
        try:
            checks = await backend.scheduler_checks(quick=True)
        except NodeError:
            return []  # the launch itself reports an unreachable login node
        label = backend.node_info(0).label
        return [Refusal(label, Check(c.name, "error", c.detail, c.fix)) for c in checks if c.status == "error"]
    found = await asyncio.gather(*(node_refusals(backend, n.node_rank) for n in plan.nodes))
    return [r for node in found for r in node]


async def node_refusals(backend: Backend, rank: int, *, spare: bool = False) -> list[Refusal]:
    """The errors the cheap checks find on node ``rank``. ``spare``: the node is a spare about to take a
    failed node's place, and the bar is higher: a node that cannot be reached, or whose probe cannot run,
    or whose ``nvidia-smi`` fails (a GPU that fell off the bus), is refused too."""
    plan = backend.plan
    # A workload's own command may bring its own packages (a venv, a container): only the built-in
    # trainer's needs are certain, and environment.dependencies are installed by the job itself.
    packages_matter = plan.uses_builtin_trainer and not plan.dependencies
    info = backend.node_info(rank)
    node = plan.nodes[rank]
    params = {"packages": probe_packages(plan), "import_timeout_s": QUICK_TIMEOUT_S, "quick": True,
              "run_root": plan.node_root, "master_addr": plan.master_addr, "master_port": plan.master_port,
              "bind": False, "output_dir": plan.workload.parameters.get("output_dir"),
              "env": dict(node.env), "node_dir": node.node_dir}
    try:
        ran = await backend.run_script(rank, info.python, probe_script(params), QUICK_TIMEOUT_S)
    except NodeError as err:
        # A launch reports an unreachable node in its own words; a spare that cannot be reached is no spare.
        return [Refusal(info.label, Check("reachable", "error", str(err)))] if spare else []
    facts = parse_probe_output(ran.stdout)
    if facts is None:  # the probe could not run under this interpreter: the job's start will say why
        tail = (ran.stderr.strip().splitlines() or [f"exit status {ran.exit_status}"])[-1][:300]
        return [Refusal(info.label, Check("python", "error", f"{info.python} did not run the probe: {tail}"))] \
            if spare else []
    report = evaluate(plan, plan.nodes[rank], NodeProbe(info.label, info.python, info.local, facts=facts))
    skipped = SKIPPED if packages_matter else SKIPPED | PACKAGE_CHECKS
    refused = [Refusal(info.label, c) for c in report.checks if c.status == "error" and c.name not in skipped]
    if spare and facts.gpus.error and not any(r.check.name == "gpus" for r in refused):
        refused.append(Refusal(info.label, Check("gpus", "error", f"nvidia-smi failed: {facts.gpus.error}",
                                                 "a GPU that fell off the bus needs the machine's attention")))
    return refused
