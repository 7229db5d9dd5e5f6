"""How many nodes, how many processes each, and where: derived from ``compute``."""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.words import plural
from launcher.workload.accelerators import parse_accelerator
from launcher.workload.hosts import HostTarget, parse_host
from launcher.workload.model import Workload

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Finding:
    """A topology problem with the dotted path it belongs to."""

    path: Path
    severity: str
    message: str
    hint: str = ""


@dataclass(frozen=True)
class Topology:
    kind: str
    """``gpu`` or ``cpu``."""
    procs_per_node: int
    num_nodes: int
    hosts: tuple[HostTarget, ...]
    """One per node, or empty: this machine, no SSH."""
    gpu_model: str | None = None
    findings: tuple[Finding, ...] = field(default=())
    slurm: bool = False
    """The nodes come from a SLURM job (``compute.slurm``), not from ``hosts``."""

    @property
    def is_local(self) -> bool:
        return not self.hosts and not self.slurm

    @property
    def world_size(self) -> int:
        return self.procs_per_node * self.num_nodes


def resolve_topology(workload: Workload) -> Topology:
    """The run's shape, with every inconsistency in ``findings`` (nothing raises)."""
    c = workload.compute
    findings: list[Finding] = []
    kind, per_node, model = "cpu", None, None
    if c.accelerator_type is not None:
        acc, message, hint = parse_accelerator(c.accelerator_type)
        if acc is None:
            findings.append(Finding(("compute", "accelerator_type"), "error", message, hint))
        else:
            if message:
                findings.append(Finding(("compute", "accelerator_type"), "warning", message, hint))
            kind, per_node, model = acc.kind, acc.per_node, acc.model
    elif c.gpus_per_node is not None:
        kind = "gpu"
    if kind == "gpu" and c.gpus_per_node is not None:
        if per_node is not None and per_node != c.gpus_per_node:
            findings.append(Finding(("compute", "gpus_per_node"), "error",
                                    f"{plural(c.gpus_per_node, 'GPU')} per node, but accelerator_type "
                                    f"'{c.accelerator_type}' has {per_node}", "keep one of the two"))
        per_node = c.gpus_per_node
    if c.procs_per_node is not None:
        if kind == "gpu":
            findings.append(Finding(("compute", "procs_per_node"), "error",
                                    "procs_per_node is for CPU runs; a GPU run starts one process per GPU",
                                    "use gpus_per_node, or accelerator_type: CPU"))
        else:
            per_node = c.procs_per_node
    if kind == "cpu" and per_node is None:
        per_node = 1
    if per_node is None:
        per_node = 1

    num_nodes = max(len(c.hosts), 1) if c.slurm is None else (c.slurm.nodes or 1)
    if c.num_accelerators is not None:
        if c.num_accelerators % per_node:
            lower = max(per_node, c.num_accelerators - c.num_accelerators % per_node)
            findings.append(Finding(("compute", "num_accelerators"), "error",
                                    f"{c.num_accelerators} is not a multiple of {per_node} per node",
                                    f"use {lower} or {lower + per_node}"))
        else:
            num_nodes = c.num_accelerators // per_node

    if c.slurm is not None:
        from launcher.workload.slurm import findings as slurm_findings

        findings += [Finding(path, sev, msg, hint or "") for path, sev, msg, hint in
                     slurm_findings(workload, c.slurm, num_nodes, per_node, kind)]
        return Topology(kind, per_node, num_nodes, (), model, tuple(findings), slurm=True)
    hosts = _hosts(c.hosts, findings)
    if c.hosts and len(c.hosts) != num_nodes:
        findings.append(Finding(("compute", "hosts"), "error",
                                f"{plural(len(c.hosts), 'host')} for {plural(num_nodes, 'node')} "
                                f"({plural(c.num_accelerators or 0, 'accelerator')} / {per_node} per node)",
                                "list one host per node"))
    if not c.hosts and num_nodes > 1:
        findings.append(Finding(("compute",), "warning",
                                f"no compute.hosts: {plural(num_nodes, 'node')} need one SSH host each to run "
                                "outside Databricks",
                                f"add 'hosts: [node0, node1, ...]' with {plural(num_nodes, 'entry')}"))
    if len(hosts) > 1 and hosts[0].is_local and not c.master_addr and not all(h.is_local for h in hosts):
        findings.append(Finding(("compute", "hosts", 0), "warning",
                                "node 0 is localhost, which the other nodes cannot reach",
                                "set compute.master_addr to this machine's address on their network"))
    if kind == "cpu" and model is None and c.gpus_per_node is not None:
        findings.append(Finding(("compute", "gpus_per_node"), "error",
                                "gpus_per_node with accelerator_type CPU", "use procs_per_node"))
    return Topology(kind, per_node, num_nodes, tuple(hosts), model, tuple(findings))


def _hosts(entries: list[str], findings: list[Finding]) -> list[HostTarget]:
    hosts: list[HostTarget] = []
    seen: dict[str, int] = {}
    for i, text in enumerate(entries):
        try:
            host = parse_host(text)
        except ValueError as err:
            findings.append(Finding(("compute", "hosts", i), "error", str(err),
                                    "write alias, user@host, host:port or localhost"))
            continue
        if text in seen:
            findings.append(Finding(("compute", "hosts", i), "warning",
                                    f"'{text}' is also node {seen[text]}",
                                    "two nodes on one machine share its GPUs"))
        seen.setdefault(text, i)
        hosts.append(host)
    return hosts
