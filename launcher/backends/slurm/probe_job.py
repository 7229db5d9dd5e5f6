"""The doctor's probe job: one short task per node through ``srun``, from the login node.

Each task reports its hostname, the workload's Python and the versions of the packages the run needs
(read from package metadata, nothing imported), and writes a file named after its hostname into a fresh
folder under the run's ``job_dir``; the login node then lists that folder, so a node whose file it cannot
see does not share ``job_dir`` with it. A job that waits in the queue past ``PENDING_S`` is cancelled and
reported as a warning with SLURM's reason. The judging is pure."""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Literal

from launcher.backends.base import NodeError, SchedulerCheck
from launcher.backends.slurm.script import placement_options
from launcher.untrusted import clean_reply
from launcher.words import plural

if TYPE_CHECKING:
    from launcher.backends.slurm.login import LoginNode

Level = Literal["ok", "warning", "error"]
PerNode = tuple[str, Level, str, str]
"""One node's ``(host, status, detail, fix)`` for a check grouped over the nodes."""

PENDING_S = 60.0
"""How long the probe job may take in all, queueing included, before it is cancelled."""
MARKER = "FSDP_TUI_SLURM_PROBE "
MIN_PYTHON = (3, 10)
BUILTIN_PACKAGES = ("transformers", "datasets", "pydantic", "pyyaml")

NODE_CODE = """import json, os, socket, sys
folder = os.path.expanduser(sys.argv[1])
host = socket.gethostname()
out = {"hostname": host, "python": list(sys.version_info[:3]), "executable": sys.executable, "packages": {}}
try:
    from importlib import metadata
    for dist in json.loads(sys.argv[2]):
        try:
            out["packages"][dist] = metadata.version(dist)
        except Exception:
            out["packages"][dist] = None
except Exception as err:
    out["packages_error"] = repr(err)
try:
    if not os.path.isdir(folder):
        os.makedirs(folder)
    with open(os.path.join(folder, host), "w") as f:
        f.write(host)
    out["wrote"] = True
except Exception as err:
    out["wrote"] = str(err)
sys.stdout.write("\\n%s%s\\n" % (sys.argv[3], json.dumps(out)))
"""

LOGIN_CODE = """import json, os, shutil, sys
folder = os.path.expanduser(FOLDER)
if ACTION == "make":
    os.makedirs(folder)
    print(json.dumps([]))
else:
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else None
    shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(names))
"""


def login_script(folder: str, action: str) -> str:
    """Run on the login node: ``make`` the fresh folder, or ``list`` it (then remove it)."""
    return f"FOLDER = {folder!r}\nACTION = {action!r}\n" + LOGIN_CODE


def packages(plan) -> list[str]:
    return ["torch", *(BUILTIN_PACKAGES if plan.uses_builtin_trainer else ())]


def srun_argv(plan, python: str, folder: str, name: str) -> list[str]:
    argv = ["srun", f"--job-name={name}", f"--nodes={plan.topology.num_nodes}", "--ntasks-per-node=1",
            "--time=2", "--label", "--chdir=/tmp", *placement_options(plan)]
    return [*argv, python, "-c", NODE_CODE, folder, json.dumps(packages(plan)), MARKER]


def parse_srun(stdout: str) -> dict[int, dict]:
    """Each task's report by task number (``srun --label`` prefixes ``N: ``)."""
    found = {}
    for line in stdout.splitlines():
        m = re.match(r"^\s*(\d+): (.*)$", line)
        if m and m.group(2).startswith(MARKER):
            try:
                found[int(m.group(1))] = clean_reply(json.loads(m.group(2)[len(MARKER):]))
            except ValueError:
                continue
    return found


def _group(name: str, per_node: list[PerNode]) -> SchedulerCheck:
    """One check from ``(host, status, detail, fix)`` per node: one line when all agree."""
    order: dict[Level, int] = {"ok": 0, "warning": 1, "error": 2}
    levels: list[Level] = [p[1] for p in per_node]
    worst = max(levels, key=lambda level: order[level])
    details = {p[2] for p in per_node}
    if len(details) == 1:
        detail = f"{per_node[0][2]} on {', '.join(p[0] for p in per_node)}"
    else:
        detail = "; ".join(f"{p[0]}: {p[2]}" for p in per_node)
    fix = next((p[3] for p in per_node if p[1] == worst and p[3]), "")
    return SchedulerCheck(name, worst, detail, fix)


def shared_check(reports: dict[int, dict], listing: list[str] | None, job_dir: str) -> SchedulerCheck:
    """Whether every node wrote its file and the login node sees them all. Pure."""
    fix_share = (f"set compute.slurm.job_dir to a folder on a filesystem the login and compute nodes share "
                 f"(now {job_dir})")
    unwritable = {r["hostname"]: r.get("wrote") for r in reports.values() if r.get("wrote") is not True}
    if unwritable:
        return SchedulerCheck("job_dir", "error", "cannot write under job_dir on " + "; ".join(
            f"{h}: {why}" for h, why in sorted(unwritable.items())),
            f"make {job_dir} writable from the compute nodes, or point compute.slurm.job_dir elsewhere")
    hosts = sorted(r["hostname"] for r in reports.values())
    seen = set(listing or [])
    unseen = [h for h in hosts if h not in seen]
    if listing is None or unseen:
        return SchedulerCheck("job_dir", "error", f"the login node does not see the files "
                              f"{', '.join(unseen or hosts)} wrote under {job_dir}: it is not shared with them",
                              fix_share)
    return SchedulerCheck("job_dir", "ok", f"{job_dir} is written by {', '.join(hosts)} and seen by the login node")


def node_checks(plan, python: str, reports: dict[int, dict], listing: list[str] | None) -> list[SchedulerCheck]:
    """The per-concern checks from the tasks' reports. Pure."""
    if not reports:
        return []
    ordered = [reports[k] for k in sorted(reports)]
    py: list[PerNode] = []
    for r in ordered:
        version = tuple(r.get("python", ()))
        text = ".".join(map(str, version))
        if version < MIN_PYTHON:
            py.append((r["hostname"], "error", f"{text} ({r.get('executable')}) is older than 3.10",
                       "point environment.python at a Python 3.10+ interpreter the compute nodes have"))
        else:
            py.append((r["hostname"], "ok", f"{text} ({r.get('executable') or python})", ""))
    checks = [SchedulerCheck("hostname", "ok", ", ".join(r["hostname"] for r in ordered)), _group("python", py)]
    for dist in packages(plan):
        per: list[PerNode] = []
        for r in ordered:
            if "packages_error" in r:
                per.append((r["hostname"], "error", f"cannot read package versions: {r['packages_error']}", ""))
                continue
            version = r.get("packages", {}).get(dist)
            if version is None:
                per.append((r["hostname"], "error", f"not installed for {python}",
                            f"install it on the compute nodes ({python} -m pip install {dist}), or set "
                            "environment.python to an interpreter that has it"))
            elif dist == "torch" and plan.topology.kind == "gpu" and version.endswith("+cpu"):
                per.append((r["hostname"], "error", f"{version}: a GPU workload needs a CUDA build",
                            "install a CUDA build of torch for environment.python (see pytorch.org/get-started)"))
            else:
                per.append((r["hostname"], "ok", version, ""))
        checks.append(_group("yaml" if dist == "pyyaml" else dist, per))
    checks.append(shared_check(reports, listing, plan.node_root))
    return checks


async def probe_checks(login: LoginNode) -> list[SchedulerCheck]:
    """Run the probe job and judge what came back; no job is left in the queue."""
    plan = login.plan
    python = login.fleet.python_of(plan.nodes[0])
    login_python = login.fleet.agent_python or python  # the login agent's own (the doctor may fall back to python3)
    tag = uuid.uuid4().hex[:10]
    folder = f"{plan.node_root}/{plan.run_id}/doctor-probe-{tag}"
    name = f"fsdp-tui-doctor-{tag}"
    need = plan.topology.num_nodes
    try:
        made = await login.run_script(login_python, login_script(folder, "make"), 30)
        if made.exit_status != 0:
            return [SchedulerCheck("job_dir", "error", f"cannot make {folder} on {login.label}: "
                                   f"{made.stderr.strip()[-300:]}", "make compute.slurm.job_dir writable there")]
        status, out, err = await login.ask(srun_argv(plan, python, folder, name), timeout_s=PENDING_S)
        waiting = None
        if status is None:  # no answer in time: queued, or slow
            _, q, _ = await login.ask(["squeue", "--noheader", f"--name={name}", "--format=%i|%T|%r"])
            waiting = next((line.split("|") for line in q.splitlines() if line.count("|") == 2), None)
    finally:
        await login.ask(["scancel", f"--name={name}"])
        ran = await login.run_script(login_python, login_script(folder, "list"), 30)
    try:
        listing = clean_reply(json.loads(ran.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        listing = None
    if status is None:
        if waiting is not None and waiting[1] == "PENDING":
            return [SchedulerCheck("probe job", "warning", f"still waiting after {PENDING_S:.0f} s ({waiting[2]}): "
                                   "cancelled; the compute nodes were not checked",
                                   "the cluster is busy or the request cannot run yet: try later, or `squeue -p "
                                   "PARTITION` to see what waits")]
        return [SchedulerCheck("probe job", "error", f"srun gave no answer within {PENDING_S:.0f} s "
                               f"({waiting[1] if waiting else 'no longer queued'}): cancelled",
                               "try `srun --nodes=1 hostname` on the login node by hand")]
    reports = parse_srun(out)
    checks = []
    if status != 0 or len(reports) < need:
        tail = (err or out).strip().splitlines()[-3:]
        checks.append(SchedulerCheck("probe job", "error", f"srun exited {status} with {len(reports)} of {need} "
                                     f"node reports: {' '.join(tail)[:400]}",
                                     f"is environment.python ({python}) there on the compute nodes? try by hand: "
                                     f"srun --nodes={need} {python} -V"))
    else:
        checks.append(SchedulerCheck("probe job", "ok", f"ran on {plural(need, 'node')} through srun"))
    return checks + node_checks(plan, python, reports, listing)


async def safe_probe_checks(login: LoginNode) -> list[SchedulerCheck]:
    try:
        return await probe_checks(login)
    except NodeError as err:
        return [SchedulerCheck("probe job", "error", str(err), "check that the login node is reachable")]
