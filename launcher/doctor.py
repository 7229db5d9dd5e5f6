"""Preflight for a workload: every node probed in parallel, every outcome judged and reported.

Probing (``diagnose``) runs ``launcher/probe.py`` on each node under the workload's Python, over the
node's verified SSH connection or as a local subprocess. Judging (``evaluate``) is pure: the probe's
facts against the plan, one ``Check`` per concern, each ok / warning / error with what to do.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from launcher.plan import NodePlan, RunPlan

Status = Literal["ok", "warning", "error"]
STATUS_ORDER: dict[str, int] = {"ok": 0, "warning": 1, "error": 2}

MIN_PYTHON = (3, 10)
MIN_TORCH_BUILTIN = (2, 6)
"""The built-in trainer uses FSDP2 (``fully_shard``)."""
LOW_DISK_GIB = 5.0
IMPORT_TIMEOUT_S = 120.0
"""A cold ``import torch`` on a shared filesystem can take tens of seconds."""
FALLBACK_PYTHON = "python3"
PROBE_SOURCE = Path(__file__).with_name("probe.py")

TORCH = ("torch", "torch")
BUILTIN_TRAINER_PACKAGES = (("transformers", "transformers"), ("datasets", "datasets"),
                            ("pydantic", "pydantic"), ("pyyaml", "yaml"))
"""(distribution, module) pairs the built-in trainer imports on a node, besides torch."""


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    """One line: what was found."""
    fix: str = ""
    """For a warning or error: what to do."""


@dataclass(frozen=True)
class NodeProbe:
    """What came back from one node, before it is judged."""

    label: str
    python: str
    """The interpreter the workload runs with on this node (after ``python3`` -> this one, locally)."""
    local: bool
    reach_error: str | None = None
    """Why the node could not be reached; nothing else is known then."""
    facts: dict | None = None
    """The probe's JSON; from a fallback interpreter when ``python_failure`` is set."""
    python_failure: str | None = None
    """Why ``python`` did not run the probe."""


@dataclass(frozen=True)
class NodeReport:
    node_rank: int
    label: str
    checks: tuple[Check, ...]
    facts: dict | None = None

    @property
    def status(self) -> Status:
        return max((c.status for c in self.checks), key=STATUS_ORDER.__getitem__, default="ok")


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

    def summary(self) -> str:
        n = len(self.nodes)
        return (f"{n} node{'s' if n != 1 else ''}: {self.counts['ok']} ok, {self.counts['warning']} with "
                f"warnings, {self.counts['error']} with errors")

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "summary": {"nodes": len(self.nodes), **self.counts},
            "nodes": [{"node_rank": n.node_rank, "label": n.label, "status": n.status,
                       "checks": [asdict(c) for c in n.checks], "facts": n.facts} for n in self.nodes],
        }


# -- probing ---------------------------------------------------------------------------------------


def probe_packages(plan: RunPlan) -> list[tuple[str, str]]:
    return [TORCH, *(BUILTIN_TRAINER_PACKAGES if plan.uses_builtin_trainer else ())]


def probe_script(params: dict) -> str:
    """The probe's source plus the one call that runs it; the parameters ride inside the script."""
    return PROBE_SOURCE.read_text() + f"\n\nmain({json.dumps(params)!r})\n"


def parse_probe_output(stdout: str) -> dict | None:
    from launcher.probe import MARKER

    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    return None


@dataclass(frozen=True)
class _Ran:
    exit_status: int | None
    stdout: str
    stderr: str


async def _run_local(python: str, script: str, timeout_s: float) -> _Ran:
    try:
        proc = await asyncio.create_subprocess_exec(python, "-", stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
    except OSError as err:
        return _Ran(127, "", f"{python}: {err.strerror or err}")
    try:
        out, err = await asyncio.wait_for(proc.communicate(script.encode()), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return _Ran(None, "", f"the probe did not finish within {timeout_s:.0f}s")
    return _Ran(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


class _ConnectionLost(Exception):
    """The SSH connection broke while the probe ran."""


async def _run_remote(conn, python: str, script: str, timeout_s: float) -> _Ran:
    import asyncssh

    try:
        result = await asyncio.wait_for(conn.run(f"{shlex.quote(python)} -", input=script, check=False),
                                        timeout_s)
    except asyncio.TimeoutError:
        return _Ran(None, "", f"the probe did not finish within {timeout_s:.0f}s")
    except (asyncssh.Error, OSError) as err:
        raise _ConnectionLost(str(err) or type(err).__name__) from None
    return _Ran(result.exit_status, result.stdout or "", result.stderr or "")


def _failure(python: str, ran: _Ran) -> str:
    tail = ran.stderr.strip().splitlines()[-1:] or [f"exit status {ran.exit_status}"]
    if ran.exit_status in (126, 127):
        return f"{python} does not run: {tail[0]}"
    older = " (a Python older than 3.7? the workload needs 3.10+)" if "SyntaxError" in tail[0] else ""
    return f"{python} could not run the probe: {tail[0][:300]}{older}"


async def _probe_node(plan: RunPlan, node: NodePlan, run_root: str, import_timeout_s: float) -> NodeProbe:
    from launcher.nodes import LocalNode, node_backend

    backend = node_backend(plan, node)
    params = {"packages": probe_packages(plan), "import_timeout_s": import_timeout_s, "run_root": run_root,
              "master_addr": plan.master_addr, "master_port": plan.master_port, "bind": node.node_rank == 0}
    timeout_s = import_timeout_s + 30
    local = isinstance(backend, LocalNode)
    conn = None
    if local:
        fallback = sys.executable

        async def run(python: str, script: str) -> _Ran:
            return await _run_local(python, script, timeout_s)
    else:
        from launcher.ssh import SshError, connect

        fallback = FALLBACK_PYTHON
        try:
            conn = await connect(node.host, plan.workload.ssh)
        except SshError as err:
            return NodeProbe(backend.label, backend.python, local, reach_error=str(err))

        async def run(python: str, script: str) -> _Ran:
            return await _run_remote(conn, python, script, timeout_s)
    try:
        ran = await run(backend.python, probe_script(params))
        facts = parse_probe_output(ran.stdout)
        if facts is not None:
            return NodeProbe(backend.label, backend.python, local, facts=facts)
        failure = _failure(backend.python, ran)
        if fallback == backend.python:
            return NodeProbe(backend.label, backend.python, local, python_failure=failure)
        # The machine checks (GPUs, disk, port) need some Python, not the workload's.
        ran = await run(fallback, probe_script({**params, "packages": []}))
        return NodeProbe(backend.label, backend.python, local, facts=parse_probe_output(ran.stdout),
                         python_failure=failure)
    except _ConnectionLost as err:
        return NodeProbe(backend.label, backend.python, local,
                         reach_error=f"{node.host_display}: connection lost during the probe: {err}")
    finally:
        if conn is not None:
            conn.close()


async def diagnose(plan: RunPlan, *, run_root: str, import_timeout_s: float = IMPORT_TIMEOUT_S) -> DoctorReport:
    """Probe every node at once; a node that fails never hides the others."""
    results = await asyncio.gather(*(_probe_node(plan, n, run_root, import_timeout_s) for n in plan.nodes),
                                   return_exceptions=True)
    probes: list[NodeProbe] = []
    for node, result in zip(plan.nodes, results, strict=True):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result
            label = f"node {node.node_rank} ({node.host_display})"
            result = NodeProbe(label, plan.workload.environment.python, node.host is None or node.host.is_local,
                               reach_error=f"{label}: the probe failed: {type(result).__name__}: {result}")
        probes.append(result)
    node0 = probes[0].facts.get("hostname") if probes and probes[0].facts else None
    return DoctorReport(tuple(evaluate(plan, n, p, node0_hostname=node0) for n, p in zip(plan.nodes, probes,
                                                                                          strict=True)))


# -- judging ---------------------------------------------------------------------------------------


def evaluate(plan: RunPlan, node: NodePlan, probe: NodeProbe, *, node0_hostname: str | None = None) -> NodeReport:
    """The checks for one node from what its probe found. Pure."""
    host = node.host_display
    if probe.reach_error is not None:
        fix = ""
        if "cannot connect" in probe.reach_error or "connection lost" in probe.reach_error:
            fix = f"check that {host} is up and that `ssh {host}` works from here without a password"
            if "TimeoutError" in probe.reach_error:
                fix += f" (no answer within ssh.connect_timeout_s={plan.workload.ssh.connect_timeout_s:g}s)"
        return NodeReport(node.node_rank, probe.label, (Check("reachable", "error", probe.reach_error, fix),))
    checks = [Check("reachable", "ok", "this machine, no SSH" if probe.local
                    else "connected over SSH, host key verified")]
    facts = probe.facts or {}
    if facts.get("hostname"):
        checks.append(Check("hostname", "ok", facts["hostname"]))
    checks.append(_python_check(probe, facts, host))
    if probe.python_failure is None:
        checks += _package_checks(plan, probe, facts.get("packages", {}), host)
    if probe.facts is None:
        return NodeReport(node.node_rank, probe.label, tuple(checks))
    checks.append(_gpu_check(plan, facts.get("gpus", {}), host))
    checks.append(_disk_check(facts.get("disk", {}), host))
    if node.node_rank == 0:
        checks.append(_port_check(plan, facts.get("master", {}), host))
    else:
        checks.append(_resolve_check(plan, facts.get("master", {}), host, facts.get("hostname"), node0_hostname))
    return NodeReport(node.node_rank, probe.label, tuple(checks), probe.facts)


def _python_check(probe: NodeProbe, facts: dict, host: str) -> Check:
    if probe.python_failure is not None:
        more = "" if probe.facts is not None else "; nothing else could be checked there"
        return Check("python", "error", f"environment.python: {probe.python_failure}{more}",
                     f"install it on {host}, or set environment.python to an interpreter that exists there")
    info = facts.get("python", {})
    if "error" in info or "version" not in info:
        return Check("python", "error", f"{probe.python}: {info.get('error', 'no version reported')}")
    version = tuple(info["version"])
    text = ".".join(map(str, version))
    detail = f"{text} ({info.get('executable') or probe.python})"
    if version < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Check("python", "error", f"{detail} is older than {need}",
                     f"point environment.python at a Python {need}+ interpreter on {host}")
    return Check("python", "ok", detail)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _package_checks(plan: RunPlan, probe: NodeProbe, packages: dict, host: str) -> list[Check]:
    if "error" in packages:
        return [Check("packages", "error", f"could not inspect packages: {packages['error']}")]
    gpu = plan.topology.kind == "gpu"
    checks = []
    for dist, module in probe_packages(plan):
        info = packages.get(dist, {})
        name = module if module == dist else dist
        install = f"{probe.python} -m pip install {dist}"
        if info.get("error"):
            checks.append(Check(name, "error", info["error"], f"point environment.python at Python 3.10+ on {host}"))
        elif info.get("version") is None:
            checks.append(Check(name, "error", f"not installed for {probe.python}",
                                f"install it on {host} ({install}), or set environment.python to an "
                                f"interpreter that has it"))
        elif info.get("import") != "ok":
            checks.append(Check(name, "error", f"{info['version']} is installed but `import {module}` fails: "
                                f"{info.get('import', 'not tried')}",
                                f"run `{probe.python} -c 'import {module}'` on {host} for the full error, "
                                "then repair or reinstall it"))
        elif dist == "torch":
            checks.append(_torch_check(plan, info, gpu, host, install))
        else:
            checks.append(Check(name, "ok", info["version"]))
    return checks


def _torch_check(plan: RunPlan, info: dict, gpu: bool, host: str, install: str) -> Check:
    version, cuda = info["version"], info.get("cuda")
    detail = f"{version} ({f'CUDA {cuda}' if cuda else 'CPU-only build'})"
    if plan.uses_builtin_trainer and _version_tuple(version) < MIN_TORCH_BUILTIN:
        need = ".".join(map(str, MIN_TORCH_BUILTIN))
        return Check("torch", "error", f"{detail}: the built-in trainer needs torch {need}+ (FSDP2)",
                     f"upgrade it on {host} ({install}>={need})")
    if gpu and not cuda:
        return Check("torch", "error", f"{detail}: a GPU workload needs a CUDA build",
                     f"install a CUDA build of torch on {host} (see pytorch.org/get-started)")
    return Check("torch", "ok", detail)


def _gpu_check(plan: RunPlan, gpus: dict, host: str) -> Check:
    topo = plan.topology
    need = topo.procs_per_node
    if "error" in gpus:
        found, count = f"nvidia-smi failed: {gpus['error']}", 0
    else:
        names = gpus.get("names", [])
        count = len(names)
        found = "no nvidia-smi" if gpus.get("smi") is None else (
            f"{count} GPU{'s' if count != 1 else ''}" + (f": {names[0]}" if names else ""))
    if topo.kind != "gpu":
        return Check("gpus", "ok", f"{found}; CPU workload ({need} process{'es' if need != 1 else ''} per node)")
    wanted = f"the workload runs {need} GPU process{'es' if need != 1 else ''} per node"
    accel = plan.workload.compute.accelerator_type
    if count < need:
        return Check("gpus", "error", f"{found}, but {wanted}" + (f" ({accel})" if accel else ""),
                     f"run on a node with {need}+ GPUs, or lower compute.accelerator_type/gpus_per_node "
                     "(and num_accelerators) to what the nodes have")
    names = gpus.get("names", [])
    if topo.gpu_model and not all(topo.gpu_model.lower() in n.lower() for n in names[:need]):
        return Check("gpus", "warning", f"{found}, but the workload says {topo.gpu_model}",
                     f"set compute.accelerator_type to the GPUs {host} has, so memory estimates match")
    return Check("gpus", "ok", f"{found}; {wanted}")


def _disk_check(disk: dict, host: str) -> Check:
    if "error" in disk:
        return Check("disk", "error", f"could not check the run root: {disk['error']}")
    free_gib = disk["free_bytes"] / 2**30
    where = disk["path"] if disk["existing"] == disk["path"] else f"{disk['existing']} (for {disk['path']})"
    detail = f"{free_gib:.1f} GiB free at {where}"
    if not disk.get("writable", True):
        return Check("disk", "error", f"{disk['existing']} is not writable", f"make it writable on {host}")
    if free_gib < LOW_DISK_GIB:
        return Check("disk", "warning", f"only {detail}",
                     f"free space on {host}: logs, code snapshots and checkpoints land there")
    return Check("disk", "ok", detail)


def _port_check(plan: RunPlan, master: dict, host: str) -> Check:
    target = f"{plan.master_addr}:{plan.master_port}"
    if "error" in master:
        return Check("rendezvous", "error", f"could not check {target}: {master['error']}")
    if "resolve_error" in master:
        return Check("rendezvous", "error", f"MASTER_ADDR {plan.master_addr!r} does not resolve on {host}: "
                     f"{master['resolve_error']}",
                     "set compute.master_addr to node 0's IP address (an ~/.ssh/config alias is not a DNS name)")
    bind = master.get("bind_error")
    if bind is None:
        return Check("rendezvous", "ok", f"{target} is free to bind")
    if bind["errno"] == "EADDRINUSE":
        where = "" if bind["where"] == "addr" else " (held on another interface)"
        held = f"port {plan.master_port} is in use on {host}{where}"
        if plan.workload.compute.master_port is None:
            return Check("rendezvous", "warning", f"{held}; the launch will rendezvous on a free port instead",
                         f"stop what holds it (ss -ltnp 'sport = :{plan.master_port}') or set "
                         "compute.master_port to pin a port")
        return Check("rendezvous", "error", held,
                     f"pick a free one (--set compute.master_port={plan.master_port + 1}), or stop what holds it "
                     f"(ss -ltnp 'sport = :{plan.master_port}')")
    if bind["errno"] == "EADDRNOTAVAIL":
        return Check("rendezvous", "error", f"MASTER_ADDR {plan.master_addr} ({', '.join(master['addrs'])}) "
                     f"is not an address of node 0 ({host})",
                     "set compute.master_addr to node 0's address as the other nodes reach it")
    return Check("rendezvous", "error", f"cannot bind {target}: {bind['errno']} {bind['message']}",
                 "use a port of 1024 or above that nothing else uses (compute.master_port)")


def _resolve_check(plan: RunPlan, master: dict, host: str, hostname: str | None,
                   node0_hostname: str | None) -> Check:
    import ipaddress

    addr = plan.master_addr
    if "error" in master:
        return Check("master_addr", "error", f"could not resolve {addr}: {master['error']}")
    if "resolve_error" in master:
        return Check("master_addr", "error", f"MASTER_ADDR {addr!r} does not resolve on {host}: "
                     f"{master['resolve_error']}",
                     "set compute.master_addr to node 0's IP address (an ~/.ssh/config alias is not a DNS name)")
    addrs = master.get("addrs", [])
    if (addrs and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)
            and hostname and node0_hostname and hostname != node0_hostname):
        return Check("master_addr", "error", f"MASTER_ADDR {addr} is a loopback address: on {host} "
                     f"({hostname}) it is not node 0 ({node0_hostname})",
                     "set compute.master_addr to node 0's address on the nodes' network")
    return Check("master_addr", "ok", f"{addr} resolves to {', '.join(addrs)}")
