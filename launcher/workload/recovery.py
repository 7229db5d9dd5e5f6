"""When a node fails: the plan of the nodes that go on (a spare in the failed node's place, the failed
SLURM node excluded, or the run without it). Pure. (The workload's ``compute.spares`` and ``recovery:`` are
checked in :mod:`launcher.workload.recovery_checks`.)

A swapped-in node gets a run directory of its own (``node-<rank>.<swap>``): the failed machine may still
hold the old one (a node cut off from the network runs on, and on a shared disk its job would write into
the new node's files). The rank order stays: the spare takes the failed node's rank, the others keep
theirs (and their directories); a shrink drops the failed node and the ranks after it move up by one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from launcher.words import plural
from launcher.workload.model import Workload
from launcher.workload.plan import RunPlan, build_plan, with_node_dirs, with_rendezvous


def swapped_dir(plan: RunPlan, rank: int, swap: int) -> str:
    """The run directory of the node swapped into ``rank`` (the ``swap``-th of the run), beside the others."""
    base = plan.nodes[rank].node_dir.rsplit("/", 1)[0]
    return f"{base}/node-{rank}.{swap}"


def swap_plan(plan: RunPlan, rank: int, spare: str, swap: int) -> RunPlan:
    """``plan`` with ``spare`` (one of ``compute.spares``) in node ``rank``'s place, in a directory of its
    own; the other nodes, their directories and (unless node 0 is replaced) the rendezvous stay."""
    c = plan.workload.compute
    hosts = [spare if i == rank else h for i, h in enumerate(c.hosts)]
    compute = c.model_copy(update={"hosts": hosts, "spares": [s for s in c.spares if s != spare]})
    dirs = [swapped_dir(plan, rank, swap) if n.node_rank == rank else n.node_dir for n in plan.nodes]
    return _rebuilt(plan, plan.workload.model_copy(update={"compute": compute}), dirs, keep_rendezvous=rank != 0)


def without_spares(plan: RunPlan, spares: list[str]) -> RunPlan:
    """``plan`` with ``spares`` taken out of ``compute.spares`` (they failed the doctor, or were quarantined)."""
    c = plan.workload.compute
    compute = c.model_copy(update={"spares": [s for s in c.spares if s not in spares]})
    workload = plan.workload.model_copy(update={"compute": compute})
    return replace(plan, workload=workload)


def exclude_plan(plan: RunPlan, node: str) -> RunPlan:
    """A SLURM run's plan with ``node`` (SLURM's name of the node that failed) excluded from its next jobs:
    the scheduler gives the next job another node in its place."""
    c = plan.workload.compute
    assert c.slurm is not None  # only a SLURM run excludes a node
    slurm = c.slurm.model_copy(update={"exclude": [*c.slurm.exclude, node] if node not in c.slurm.exclude
                                       else c.slurm.exclude})
    workload = plan.workload.model_copy(update={"compute": c.model_copy(update={"slurm": slurm})})
    return replace(plan, workload=workload)


@dataclass(frozen=True)
class Shrunk:
    """The plan without a failed node, and how its global batch was kept (``None``: it could not be)."""

    plan: RunPlan
    batch: str = ""
    """``per_device_batch_size 4 -> 3, gradient_accumulation_steps 1 -> 2 (12 rows a step)``; empty when
    nothing changed or the workload runs its own command."""
    problem: str = ""
    """Why the run cannot go on without the node (the global batch cannot be kept on the nodes left)."""


def shrink_plan(plan: RunPlan, rank: int) -> Shrunk:
    """``plan`` without node ``rank``: the nodes after it move up one rank (keeping their directories), the
    built-in trainer's global batch kept by a smaller per-device batch and more gradient accumulation."""
    w, c = plan.workload, plan.workload.compute
    topo = plan.topology
    nodes = topo.num_nodes - 1
    update: dict[str, Any] = {}
    if c.num_accelerators is not None:
        update["num_accelerators"] = topo.procs_per_node * nodes
    if c.slurm is not None:
        update["slurm"] = c.slurm.model_copy(update={"nodes": nodes})
    else:
        update["hosts"] = [h for i, h in enumerate(c.hosts) if i != rank]
    params, words, problem = dict(w.parameters), "", ""
    if w.uses_builtin_trainer:
        b = int(params.get("per_device_batch_size", 4))
        a = int(params.get("gradient_accumulation_steps", 1))
        rows = topo.world_size * b * a
        kept = kept_batch(rows, topo.procs_per_node * nodes, b)
        if kept is None:
            problem = (f"its global batch of {plural(rows, 'row')} cannot be split evenly over the "
                       f"{plural(topo.procs_per_node * nodes, 'process')} left")
        elif kept != (b, a):
            params.update(per_device_batch_size=kept[0], gradient_accumulation_steps=kept[1])
            words = (f"per_device_batch_size {b} -> {kept[0]}, gradient_accumulation_steps {a} -> {kept[1]} "
                     f"({plural(rows, 'row')} a step, as before)")
    workload = w.model_copy(update={"compute": c.model_copy(update=update), "parameters": params})
    if not problem and w.uses_builtin_trainer:
        problem = _trainer_problem(workload)
    # A SLURM node works in node-<its rank in the job>: the directories follow the ranks there.
    dirs = None if c.slurm is not None else [n.node_dir for n in plan.nodes if n.node_rank != rank]
    return Shrunk(_rebuilt(plan, workload, dirs, keep_rendezvous=rank != 0), words, problem)


def _trainer_problem(workload: Workload) -> str:
    """What the built-in trainer's settings refuse on the smaller node set (a hybrid shard's replica count
    that no longer divides the world size, ...); empty when nothing."""
    from pydantic import ValidationError

    from launcher.workload.checks import check_trainer
    from trainer.wire.config import TrainerConfig

    try:
        cfg = TrainerConfig.model_validate(workload.parameters)
    except ValidationError as err:
        return f"its parameters on fewer nodes: {err.errors()[0]['msg']}"
    errors = [f for f in check_trainer(workload, cfg) if f.severity == "error"]
    return "; ".join(f"parameters.{'.'.join(map(str, f.path[1:]))}: {f.message}" for f in errors[:2])


def kept_batch(rows: int, world: int, per_device: int) -> tuple[int, int] | None:
    """``(per_device_batch_size, gradient_accumulation_steps)`` that make ``rows`` rows an optimiser step on
    ``world`` ranks, the per-device batch no larger than ``per_device`` (what fits a device's memory);
    ``None`` when ``rows`` is not a multiple of ``world``."""
    if world < 1 or rows % world:
        return None
    per_rank = rows // world
    for b in range(min(per_device, per_rank), 0, -1):
        if per_rank % b == 0:
            return b, per_rank // b
    return None


def _rebuilt(plan: RunPlan, workload: Workload, dirs: list[str] | None, *, keep_rendezvous: bool) -> RunPlan:
    """The plan of ``workload`` for the same run (its node root, dependencies, directories ``dirs``); the
    rendezvous kept, or node 0's new one (an alias the backend resolves)."""
    new = build_plan(workload, run_id=plan.run_id, source_file=plan.source_file, node_root=plan.node_root)
    if keep_rendezvous:
        new = with_rendezvous(new, addr=plan.master_addr, port=plan.master_port)
        new = replace(new, master_addr_is_alias=plan.master_addr_is_alias)
    elif workload.compute.master_port is None and workload.compute.slurm is None:
        new = with_rendezvous(new, port=plan.master_port)  # claimed again on the new node 0
    new = replace(new, dependencies=plan.dependencies, blockers=plan.blockers)
    return with_node_dirs(new, dirs) if dirs is not None else new
