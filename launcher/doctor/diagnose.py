"""Probing every node of a plan through its backend, all at once: the probe script (``probe.py``, sent
as text) runs under the workload's Python on each node; where that Python cannot run it, the machine
checks still run under a fallback interpreter. A node that fails never hides the others."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from launcher.backends.base import AgentStartFailed, Backend, NodeError, ScriptRun
from launcher.backends.registry import backend_for
from launcher.doctor.data_checks import node_sources
from launcher.doctor.judge import Check, DoctorReport, NodeProbe, NodeReport, evaluate, probe_packages
from launcher.doctor.reply import ProbeReply
from launcher.untrusted import clean_reply
from launcher.words import plural
from launcher.workload.ckpt_place import CheckpointPlace, with_holder
from launcher.workload.plan import RunPlan

IMPORT_TIMEOUT_S = 120.0
"""A cold ``import torch`` on a shared filesystem can take tens of seconds."""
FALLBACK_PYTHON = "python3"
PROBE_SOURCE = Path(__file__).with_name("probe.py")
NETIF_SOURCE = Path(__file__).parents[1] / "backends" / "agent" / "netif.py"
"""How a node finds the interface that reaches MASTER_ADDR: the same code as the agent's when it
starts a job, sent as text ahead of the probe (the probe runs as one script)."""


def probe_script(params: dict) -> str:
    """The probe's source plus the one call that runs it; the parameters ride inside the script."""
    return NETIF_SOURCE.read_text() + "\n\n" + PROBE_SOURCE.read_text() + f"\n\nmain({json.dumps(params)!r})\n"


def parse_probe_output(stdout: str) -> ProbeReply | None:
    """The probe's reply in a node's output (its last marked line), decoded once; ``None`` without one."""
    from launcher.doctor.probe import MARKER

    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER):])
            except ValueError:
                return None
            return ProbeReply.from_wire(clean_reply(data))  # a node's words: printable, typed
    return None


def _failure(python: str, ran: ScriptRun) -> str:
    tail = ran.stderr.strip().splitlines()[-1:] or [f"exit status {ran.exit_status}"]
    if ran.exit_status in (126, 127):
        return f"{python} does not run: {tail[0]}"
    older = " (a Python older than 3.7? the workload needs 3.10+)" if "SyntaxError" in tail[0] else ""
    return f"{python} could not run the probe: {tail[0][:300]}{older}"


async def _probe_node(backend: Backend, fallback: Backend, rank: int, params: dict, timeout_s: float) -> NodeProbe:
    info = backend.node_info(rank)
    fallback_python = sys.executable if info.local else FALLBACK_PYTHON
    script = probe_script(params)
    try:
        try:
            ran = await backend.run_script(rank, info.python, script, timeout_s)
        except AgentStartFailed:
            backend = fallback  # the workload's Python cannot even run the agent: try with another
            ran = await backend.run_script(rank, info.python, script, timeout_s)
        facts = parse_probe_output(ran.stdout)
        if facts is not None:
            return NodeProbe(info.label, info.python, info.local, facts=facts)
        failure = _failure(info.python, ran)
        if fallback_python == info.python:
            return NodeProbe(info.label, info.python, info.local, python_failure=failure)
        # The machine checks (GPUs, disk, port) need some Python, not the workload's.
        ran = await backend.run_script(rank, fallback_python, probe_script({**params, "packages": []}), timeout_s)
        return NodeProbe(info.label, info.python, info.local, facts=parse_probe_output(ran.stdout),
                         python_failure=failure)
    except NodeError as err:
        return NodeProbe(info.label, info.python, info.local, reach_error=str(err))


def secrets_check(plan: RunPlan, home: Path) -> Check:
    """The secrets the workload names, found here (a launch hands them to the nodes)."""
    from launcher.secrets import MissingSecrets, SecretStore

    if not plan.workload.secrets:
        return Check("secrets", "ok", "the workload names none")
    try:
        SecretStore(home).resolve(plan.workload.secrets)
    except MissingSecrets as err:
        return Check("secrets", "error", f"not found here: {', '.join(err.refs)}", str(err).split(": ", 1)[-1])
    return Check("secrets", "ok", f"{len(plan.workload.secrets)} found here (environment or secret store)")


async def diagnose(plan: RunPlan, *, run_root: str, import_timeout_s: float = IMPORT_TIMEOUT_S,
                   home: Path | None = None) -> DoctorReport:
    """Probe every node at once and judge each; with ``home``, also that the secrets are found here."""
    if plan.topology.slurm:
        return await _diagnose_scheduler(plan, home=home)
    backend = backend_for(plan)
    fallback = backend_for(plan, agent_python=FALLBACK_PYTHON)
    try:
        await backend.locate()
    except NodeError:
        pass  # node 0's config cannot be read: its SSH check below says so, on that node
    plan = backend.plan

    def params(rank: int) -> dict:
        node = plan.nodes[rank]
        return {"packages": probe_packages(plan), "import_timeout_s": import_timeout_s, "run_root": run_root,
                "master_addr": plan.master_addr, "master_port": plan.master_port, "bind": rank == 0,
                "output_dir": plan.workload.parameters.get("output_dir"),
                "data": [path for _, _, path, _ in node_sources(plan)],
                "env": {**node.env}, "node_dir": node.node_dir}

    try:
        results = await asyncio.gather(*(_probe_node(backend, fallback, n.node_rank, params(n.node_rank),
                                                     import_timeout_s + 30) for n in plan.nodes),
                                       return_exceptions=True)
        place = await _place(backend, plan)
    finally:
        await asyncio.gather(backend.close(), fallback.close(), return_exceptions=True)
    probes: list[NodeProbe] = []
    for node, result in zip(plan.nodes, results, strict=True):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result
            info = backend.node_info(node.node_rank)
            result = NodeProbe(info.label, info.python, info.local,
                               reach_error=f"{info.label}: the probe failed: {type(result).__name__}: {result}")
        probes.append(result)
    node0 = probes[0].facts.hostname if probes and probes[0].facts else None
    reports = [evaluate(plan, n, p, node0_hostname=node0) for n, p in zip(plan.nodes, probes, strict=True)]
    reports = await _with_ssh_reports(plan, reports, [p.local for p in probes])
    first = reports[0]
    extra = [place_check(plan, place)] if place is not None else []
    if home is not None:
        extra.append(secrets_check(plan, home))
    reports[0] = NodeReport(first.node_rank, first.label, (*first.checks, *extra), first.facts)
    return DoctorReport(tuple(reports))


async def _place(backend: Backend, plan: RunPlan) -> CheckpointPlace | None:
    """Where ``output_dir`` lands on the nodes (a marker written on node 0, looked for on the others)."""
    if plan.output_dir is None:
        return None
    try:
        return with_holder(await backend.checkpoint_place(plan.output_dir), plan.gather_to)
    except NodeError as err:
        return CheckpointPlace("unchecked", plan.output_dir, detail=str(err))


def place_check(plan: RunPlan, place: CheckpointPlace) -> Check:
    """The doctor's line on where checkpoints land and what follows (node 0's report)."""
    if place.kind == "unchecked":
        return Check("checkpoints", "warning", f"where parameters.output_dir lands is {place.words()}",
                     "a launch asks again and stops if a node cannot say")
    if place.kind == "per_node" and not plan.uses_builtin_trainer:
        return Check("checkpoints", "warning", f"parameters.output_dir is one place per node "
                     f"({', '.join(f'node {n}' for n in place.separate_nodes())} apart from node 0): a script's "
                     "checkpoints are not gathered", "point output_dir at a disk every node mounts, or a bucket URL")
    holder = place.holder
    if holder is not None and holder.node is not None and holder.node >= len(plan.nodes):
        return Check("checkpoints", "error", f"parameters.checkpoint.gather_to names node {holder.node}; the run "
                     f"has {plural(len(plan.nodes), 'node')}", f"gather_to: node0 to node{len(plan.nodes) - 1}, or here")
    return Check("checkpoints", "ok", place.words())


async def _with_ssh_reports(plan: RunPlan, reports: list[NodeReport], local: list[bool]) -> list[NodeReport]:
    """Each SSH node's report with what its config resolved to (beside ``ssh -G``), right after "reachable"."""
    from launcher.backends.registry import ssh_config_check

    checks = await asyncio.gather(*(asyncio.to_thread(ssh_config_check, plan, n.node_rank)
                                    for n, is_local in zip(plan.nodes, local, strict=True) if not is_local))
    found = iter(Check(c.name, c.status, c.detail, c.fix) for c in checks)
    out = []
    for report, is_local in zip(reports, local, strict=True):
        if not is_local:
            report = NodeReport(report.node_rank, report.label, (report.checks[0], next(found), *report.checks[1:]),
                                report.facts)
        out.append(report)
    return out


REACH_TIMEOUT_S = 30.0


async def _diagnose_scheduler(plan: RunPlan, *, home: Path | None) -> DoctorReport:
    """A SLURM workload: the login node is not where the job runs, so nothing is probed there as if it
    were; it is reached (host key verified), then the scheduler's checks (``sbatch --test-only``, the
    partition from ``sinfo``, a short probe job on the compute nodes) make one report."""
    slurm = plan.workload.compute.slurm
    if slurm is None:
        raise ValueError(f"{plan.run_id}: not a SLURM workload (compute.slurm is unset)")
    backend = backend_for(plan)
    login = slurm.login
    label = f"SLURM via {'this machine' if login == 'local' else login}"
    checks: list[Check] = []
    try:
        reach = await backend.reach(0, REACH_TIMEOUT_S)
        if not reach.ok:
            checks.append(Check("reachable", "error", reach.detail,
                                f"check that {login} is up and that `ssh {login}` works from here without a password"))
        else:
            local = backend.node_info(0).local
            checks.append(Check("reachable", "ok", "this machine, no SSH" if local
                                else "connected over SSH, host key verified"))
            try:
                try:
                    found = await backend.scheduler_checks(quick=False)
                except AgentStartFailed as err:  # the workload's Python is not on the login node
                    python = backend.node_info(0).python
                    checks.append(Check("login python", "error", f"{python} does not start fsdp-tui's agent on the "
                                        f"login node (a launch needs it there too): {err}; checked with "
                                        f"{FALLBACK_PYTHON} there instead",
                                        "set environment.python to an interpreter that the login and compute "
                                        "nodes both have (a venv in a shared folder)"))
                    await backend.close()
                    backend = backend_for(plan, agent_python=FALLBACK_PYTHON)
                    found = await backend.scheduler_checks(quick=False)
            except NodeError as err:
                checks.append(Check("scheduler", "error", str(err), "check that SLURM's commands work on the login node"))
            else:
                checks += [Check(c.name, c.status, c.detail, c.fix) for c in found]
    finally:
        await backend.close()
    if home is not None:
        checks.append(secrets_check(plan, home))
    return DoctorReport((NodeReport(0, label, tuple(checks)),))
