"""``compute.spares`` and ``recovery:`` checked: each spare as ``hosts`` are, and the rules across them. Pure."""

from __future__ import annotations

from launcher.workload.hosts import parse_host
from launcher.workload.model import Workload
from launcher.workload.topology import Finding


def recovery_findings(w: Workload, num_nodes: int) -> list[Finding]:
    """Every problem of ``compute.spares`` and ``recovery:`` (each spare as ``hosts`` are checked)."""
    c, r = w.compute, w.recovery
    out: list[Finding] = []
    seen: dict[str, int] = {}
    for i, text in enumerate(c.spares):
        path = ("compute", "spares", i)
        try:
            host = parse_host(text)
        except ValueError as err:
            out.append(Finding(path, "error", str(err), "write alias, user@host or host:port"))
            continue
        if host.is_local:
            out.append(Finding(path, "error", f"'{text}' is this machine: a spare is another machine the run can "
                               "reach over SSH", "name an SSH host"))
        elif text in c.hosts:
            out.append(Finding(path, "error", f"'{text}' is node {c.hosts.index(text)} already: a spare is a "
                               "machine the run does not use", "remove it from spares or from hosts"))
        elif text in seen:
            out.append(Finding(path, "error", f"'{text}' is spare {seen[text]} already", "list each spare once"))
        seen.setdefault(text, i)
    if c.spares and c.slurm is not None:
        out.append(Finding(("compute", "spares"), "error", "a SLURM run has no spares: the scheduler picks the "
                           "replacement (recovery excludes the failed node from the next job)",
                           "remove compute.spares"))
    elif c.spares and not c.hosts:
        out.append(Finding(("compute", "spares"), "error", "spares stand in for SSH hosts, and this run has none",
                           "list the nodes in compute.hosts"))
    if c.spares and r.max_swaps == 0:
        out.append(Finding(("recovery", "max_swaps"), "warning", "the spares are never used: recovery.max_swaps is 0",
                           "raise it, or remove compute.spares"))
    if r.shrink and num_nodes < 2:
        out.append(Finding(("recovery", "shrink"), "warning", "a one-node run cannot go on without its node",
                           "remove recovery.shrink"))
    elif r.shrink and not w.uses_builtin_trainer:
        out.append(Finding(("recovery", "shrink"), "warning", "the built-in trainer keeps its global batch on fewer "
                           "nodes; a workload's own command gets the smaller NUM_NODES and keeps its batch itself"))
    return out
