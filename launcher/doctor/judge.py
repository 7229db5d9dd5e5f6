"""Judging a node's probe, purely: the facts it found against the plan, one ``Check`` per concern,
each ok / warning / error with what to do (the network's, node 0's port and address and each node's
interface: :mod:`launcher.doctor.network_checks`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from launcher.doctor.check import Check, Status  # Check: re-exported, where the doctor's readers import it
from launcher.doctor.data_checks import data_checks, node_sources
from launcher.doctor.memory import memory_check
from launcher.doctor.network_checks import iface_check, port_check, resolve_check
from launcher.doctor.reply import (
    DiskFacts,
    GpuFacts,
    OutputDirFacts,
    PackageFacts,
    ProbeReply,
    PythonFacts,
)
from launcher.workload.plan import NodePlan, RunPlan
from trainer.wire.config import MIN_TORCH

STATUS_ORDER: dict[str, int] = {"ok": 0, "warning": 1, "error": 2}

MIN_PYTHON = (3, 10)
MIN_TORCH_BUILTIN = MIN_TORCH
"""The oldest torch the built-in trainer is verified on (it refuses older ones at start)."""
LOW_DISK_GIB = 5.0

TORCH = ("torch", "torch")
BUILTIN_TRAINER_PACKAGES = (("transformers", "transformers"), ("datasets", "datasets"),
                            ("pydantic", "pydantic"), ("pyyaml", "yaml"))
"""(distribution, module) pairs the built-in trainer imports on a node, besides torch."""


LORA_PACKAGES = (("peft", "peft"),)
"""What ``parameters.lora`` imports besides (``lora.quantize`` also bitsandbytes)."""


def probe_packages(plan: RunPlan) -> list[tuple[str, str]]:
    if not plan.uses_builtin_trainer:
        return [TORCH]
    lora = (plan.workload.parameters or {}).get("lora")
    extra = [*LORA_PACKAGES, *([("bitsandbytes", "bitsandbytes")] if lora.get("quantize") else [])] \
        if isinstance(lora, dict) else []
    return [TORCH, *BUILTIN_TRAINER_PACKAGES, *extra]


@dataclass(frozen=True)
class NodeProbe:
    """What came back from one node, before it is judged."""

    label: str
    python: str
    """The interpreter the workload runs with on this node (after ``python3`` -> this one, locally)."""
    local: bool
    """Reached without SSH (this machine)."""
    reach_error: str | None = None
    """Why the node could not be reached; nothing else is known then."""
    facts: ProbeReply | None = None
    """What the probe found; from a fallback interpreter when ``python_failure`` is set."""
    python_failure: str | None = None
    """Why ``python`` did not run the probe."""


@dataclass(frozen=True)
class NodeReport:
    node_rank: int
    label: str
    checks: tuple[Check, ...]
    facts: ProbeReply | None = None
    """What the node's probe found, typed (its reply as it came, ``facts.raw``, is what ``doctor --json``
    shows); ``None`` where nothing came back."""

    @property
    def status(self) -> Status:
        statuses: list[Status] = [c.status for c in self.checks] or ["ok"]
        return max(statuses, key=STATUS_ORDER.__getitem__)


@dataclass(frozen=True)
class DoctorReport:
    nodes: tuple[NodeReport, ...]

    @property
    def counts(self) -> dict[str, int]:
        """Nodes by their worst check."""
        counts = {"ok": 0, "warning": 0, "error": 0}
        for node in self.nodes:
            counts[node.status] += 1
        return counts

    @property
    def ok(self) -> bool:
        return self.counts["error"] == 0

    def with_checks(self, *checks: Check) -> DoctorReport:
        """The report with ``checks`` added to node 0's (what concerns the run, not one node)."""
        if not checks or not self.nodes:
            return self
        first = self.nodes[0]
        return DoctorReport((NodeReport(first.node_rank, first.label, (*first.checks, *checks), first.facts),
                             *self.nodes[1:]))

    def summary(self) -> str:
        n = len(self.nodes)
        return (f"{n} node{'s' if n != 1 else ''}: {self.counts['ok']} ok, {self.counts['warning']} with "
                f"warnings, {self.counts['error']} with errors")

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "summary": {"nodes": len(self.nodes), **self.counts},
            "nodes": [{"node_rank": n.node_rank, "label": n.label, "status": n.status,
                       "checks": [asdict(c) for c in n.checks], "facts": n.facts.raw if n.facts is not None else None}
                      for n in self.nodes],
        }


# -- judging ---------------------------------------------------------------------------------------


def evaluate(plan: RunPlan, node: NodePlan, probe: NodeProbe, *, node0_hostname: str | None = None) -> NodeReport:
    """The checks for one node from what its probe found. Pure."""
    host = node.host_display
    if probe.reach_error is not None:
        fix = ""
        if "cannot connect" in probe.reach_error or "connection lost" in probe.reach_error:
            ssh = node.host.ssh_words if node.host is not None else f"ssh {host}"
            fix = f"check that {host} is up and that `{ssh}` works from here without a password"
            if "TimeoutError" in probe.reach_error:
                fix += f" (no answer within ssh.connect_timeout_s={plan.workload.ssh.connect_timeout_s:g}s)"
        return NodeReport(node.node_rank, probe.label, (Check("reachable", "error", probe.reach_error, fix),))
    checks = [Check("reachable", "ok", "this machine, no SSH" if probe.local
                    else "connected over SSH, host key verified")]
    facts = probe.facts
    if facts is not None and facts.hostname:
        checks.append(Check("hostname", "ok", facts.hostname))
    checks.append(_python_check(probe, facts.python if facts else PythonFacts(), host))
    if probe.python_failure is None:
        checks += _package_checks(plan, probe, facts, host)
    if facts is None:
        return NodeReport(node.node_rank, probe.label, tuple(checks))
    checks.append(_gpu_check(plan, facts.gpus, host))
    memory = memory_check(plan, facts, host)
    if memory is not None:
        checks.append(memory)
    checks.append(_disk_check(facts.disk, host))
    if plan.workload.environment.docker_image is not None:
        checks.append(_container_check(plan, facts.containers, host))
    if facts.output_dir is not None:
        checks.append(_output_dir_check(facts.output_dir, host))
    checks += [Check(name, status, detail, fix)
               for name, status, detail, fix in data_checks(node_sources(plan), facts.data, facts.data_error, host)]
    if node.node_rank == 0:
        checks.append(port_check(plan, facts.master, host))
    else:
        checks.append(resolve_check(plan, facts.master, host, facts.hostname, node0_hostname))
    if plan.topology.num_nodes > 1:
        checks.append(iface_check(plan, node, facts.interfaces, host))
    return NodeReport(node.node_rank, probe.label, tuple(checks), facts)


def _container_check(plan: RunPlan, runtimes: Mapping[str, str | None], host: str) -> Check:
    image = plan.workload.environment.docker_image
    found = [f"{name} ({path})" for name, path in runtimes.items() if path]
    if found:
        return Check("container", "ok", f"{' and '.join(found)} {'run' if len(found) > 1 else 'runs'} {image.url if image else 'the image'}")
    return Check("container", "error", "environment.docker_image: neither docker nor podman is on PATH",
                 f"install docker or podman on {host}, or remove environment.docker_image")


def _python_check(probe: NodeProbe, info: PythonFacts, host: str) -> Check:
    if probe.python_failure is not None:
        more = "" if probe.facts is not None else "; nothing else could be checked there"
        return Check("python", "error", f"environment.python: {probe.python_failure}{more}",
                     f"install it on {host}, or set environment.python to an interpreter that exists there")
    if info.error or info.version is None:
        return Check("python", "error", f"{probe.python}: {info.error or 'no version reported'}")
    version = info.version
    text = ".".join(map(str, version))
    detail = f"{text} ({info.executable or probe.python})"
    if version < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Check("python", "error", f"{detail} is older than {need}",
                     f"point environment.python at a Python {need}+ interpreter on {host}")
    return Check("python", "ok", detail)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isascii() and ch.isdigit())  # a node's words: '²' is no digit
        parts.append(int(digits or 0))
    return tuple(parts)


def _package_checks(plan: RunPlan, probe: NodeProbe, facts: ProbeReply | None, host: str) -> list[Check]:
    if facts is not None and facts.packages_error:
        return [Check("packages", "error", f"could not inspect packages: {facts.packages_error}")]
    packages = facts.packages if facts is not None else {}
    gpu = plan.topology.kind == "gpu"
    checks = []
    for dist, module in probe_packages(plan):
        info = packages.get(dist, PackageFacts())
        name = module if module == dist else dist
        install = f"{probe.python} -m pip install {dist}"
        if info.error:
            checks.append(Check(name, "error", info.error, f"point environment.python at Python 3.10+ on {host}"))
        elif info.version is None:
            checks.append(Check(name, "error", f"not installed for {probe.python}",
                                f"install it on {host} ({install}), or set environment.python to an "
                                f"interpreter that has it"))
        elif info.imported not in ("ok", "skipped"):
            checks.append(Check(name, "error", f"{info.version} is installed but `import {module}` fails: "
                                f"{info.imported or 'not tried'}",
                                f"run `{probe.python} -c 'import {module}'` on {host} for the full error, "
                                "then repair or reinstall it"))
        elif dist == "torch":
            checks.append(_torch_check(plan, info, gpu, host, install))
        else:
            checks.append(Check(name, "ok", info.version))
    return checks


def _torch_check(plan: RunPlan, info: PackageFacts, gpu: bool, host: str, install: str) -> Check:
    version, cuda = info.version or "", info.cuda
    detail = f"{version} ({f'CUDA {cuda}' if cuda else 'CPU-only build'})"
    if plan.uses_builtin_trainer and _version_tuple(version) < MIN_TORCH_BUILTIN:
        need = ".".join(map(str, MIN_TORCH_BUILTIN))
        return Check("torch", "error", f"{detail}: the built-in trainer needs torch {need}+ (the oldest it is "
                     "verified on)",
                     f"upgrade it on {host} ({install}>={need})")
    if gpu and not cuda:
        return Check("torch", "error", f"{detail}: a GPU workload needs a CUDA build",
                     f"install a CUDA build of torch on {host} (see pytorch.org/get-started)")
    return Check("torch", "ok", detail)


def _gpu_check(plan: RunPlan, gpus: GpuFacts, host: str) -> Check:
    topo = plan.topology
    need = topo.procs_per_node
    if gpus.error:
        found, count = f"nvidia-smi failed: {gpus.error}", 0
    else:
        names = gpus.names
        count = len(names)
        found = "no nvidia-smi" if gpus.smi is None else (
            f"{count} GPU{'s' if count != 1 else ''}" + (f": {names[0]}" if names else ""))
    if topo.kind != "gpu":
        return Check("gpus", "ok", f"{found}; CPU workload ({need} process{'es' if need != 1 else ''} per node)")
    wanted = f"the workload runs {need} GPU process{'es' if need != 1 else ''} per node"
    accel = plan.workload.compute.accelerator_type
    if count < need:
        return Check("gpus", "error", f"{found}, but {wanted}" + (f" ({accel})" if accel else ""),
                     f"run on a node with {need}+ GPUs, or lower compute.accelerator_type/gpus_per_node "
                     "(and num_accelerators) to what the nodes have")
    names = gpus.names
    if topo.gpu_model and not all(topo.gpu_model.lower() in n.lower() for n in names[:need]):
        return Check("gpus", "warning", f"{found}, but the workload says {topo.gpu_model}",
                     f"set compute.accelerator_type to the GPUs {host} has, so memory estimates match")
    return Check("gpus", "ok", f"{found}; {wanted}")


def _disk_check(disk: DiskFacts, host: str) -> Check:
    if disk.error:
        return Check("disk", "error", f"could not check the run root: {disk.error}")
    free_gib = disk.free_bytes / 2**30
    where = disk.path if disk.existing == disk.path else f"{disk.existing} (for {disk.path})"
    detail = f"{free_gib:.1f} GiB free at {where}"
    if not disk.writable:
        return Check("disk", "error", f"{disk.existing} is not writable", f"make it writable on {host}")
    if free_gib < LOW_DISK_GIB:
        return Check("disk", "warning", f"only {detail}",
                     f"free space on {host}: logs, code snapshots and checkpoints land there")
    return Check("disk", "ok", detail)


def _output_dir_check(out: OutputDirFacts, host: str) -> Check:
    if out.error:
        return Check("output_dir", "error", f"could not check parameters.output_dir: {out.error}")
    if not out.is_dir:
        return Check("output_dir", "error", f"parameters.output_dir {out.path}: {out.existing} is a file",
                     f"point parameters.output_dir at a folder on {host}")
    if not out.writable:
        return Check("output_dir", "error", f"parameters.output_dir {out.path}: {out.existing} is not "
                     "writable", f"make it writable on {host}, or point parameters.output_dir elsewhere")
    return Check("output_dir", "ok", f"{out.path} can be written")


def bucket_check(url: str, why: str, own_credentials: bool) -> Check:
    """The doctor's line on the bucket the checkpoints go to: written to (and the object removed) with the
    run's credentials before any node starts. A workload that names no credentials leaves each node to its
    own (an instance role): this machine's stood in, and a failure is only a warning."""
    if not why:
        if own_credentials:
            return Check("bucket", "ok", f"{url}: writable with the run's credentials (an object written and removed)")
        return Check("bucket", "warning", f"{url}: writable with this machine's credentials; the workload names "
                     "none, so each node uses its own", "name them in secrets (AWS_ACCESS_KEY_ID: scope/key, ...) "
                     "or make sure every node's own can write there")
    fix = ("check the endpoint (env_variables: AWS_ENDPOINT_URL) and the credentials (secrets); a launch "
           "refuses until the run can write there")
    if own_credentials:
        return Check("bucket", "error", f"{url}: {why}", fix)
    return Check("bucket", "warning", f"{url}: {why} (the workload names no credentials: the nodes may have "
                 "their own)", fix)

