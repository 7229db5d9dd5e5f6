"""Who holds GPU memory on a set of nodes: every process ``nvidia-smi`` lists per GPU, and which of them
belong to one of our runs (the run id tag in its environment). After a run ends or is cancelled, a
process still listed here holds GPUs nobody uses; those of our ended runs can be stopped.

The node side is a short stdlib script run through the backend's ``run_script`` (no agent change); the
parsing of ``nvidia-smi``'s CSV is pure and tested on recorded output."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from launcher.backends.base import Backend, NodeError
from trainer.wire.ckpt_layout import ascii_int

MARKER = "FSDP_TUI_GPU_HOLDERS="
NODE_SCRIPT = r'''
import json, os, signal, subprocess, sys, time
def smi(query):
    try:
        done = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"], capture_output=True,
                              text=True, timeout=20, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return None, NO_SMI
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, str(err)
    return (done.stdout, "") if done.returncode == 0 else (None, done.stderr.strip()[-300:])
out = {}
out["gpus"], out["error"] = smi("--query-gpu=index,uuid,name,memory.used,memory.total")
out["apps"], err = smi("--query-compute-apps=gpu_uuid,pid,process_name,used_memory")
out["error"] = out["error"] or err
tags = {}
for line in (out["apps"] or "").splitlines():
    pid = line.split(",")[1].strip() if line.count(",") >= 3 else ""
    try:
        env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
    except (OSError, ValueError):
        continue
    for item in env:
        if item.startswith(b"FSDP_TUI_RUN_ID="):
            tags[pid] = item[16:].decode("utf-8", "replace")
out["tags"] = tags
stop = set(STOP)
stopped = []
for pid, run_id in tags.items():
    if run_id in stop:
        try:
            os.kill(int(pid), signal.SIGTERM)
            stopped.append(int(pid))
        except OSError:
            pass
def alive(pid):  # a zombie holds no GPU memory any more
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
deadline = time.time() + 10
for pid in stopped:
    while time.time() < deadline:
        if not alive(pid):
            break
        time.sleep(0.1)
    else:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
out["stopped"] = stopped
print("FSDP_TUI_GPU_HOLDERS=" + json.dumps(out))
'''


@dataclass(frozen=True)
class GpuHolder:
    host: str
    gpu: int | None
    gpu_name: str
    pid: int
    process: str
    used_mib: float | None
    run_id: str | None
    """The run of ours the process belongs to (its environment's tag), or ``None``: not ours."""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class NodeHolders:
    host: str
    holders: tuple[GpuHolder, ...] = ()
    gpus: int = 0
    error: str = ""
    """Why this node could not say (unreachable, no ``nvidia-smi``): never the same as "nothing held"."""
    stopped: tuple[int, ...] = ()


def _csv(text: str) -> list[list[str]]:
    return [[p.strip() for p in line.split(",")] for line in text.splitlines() if line.strip()]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_holders(host: str, gpus_csv: str, apps_csv: str, tags: dict[str, str]) -> tuple[list[GpuHolder], int]:
    """Processes from ``--query-compute-apps=gpu_uuid,pid,process_name,used_memory`` matched to GPU indexes
    from ``--query-gpu=index,uuid,name,...``; returns the holders and the number of GPUs."""
    by_uuid = {}
    rows = _csv(gpus_csv)
    for row in rows:
        index = ascii_int(row[0]) if len(row) >= 3 else None
        if index is not None:
            by_uuid[row[1]] = (index, row[2])
    holders = []
    for row in _csv(apps_csv):
        pid = ascii_int(row[1]) if len(row) >= 4 else None
        if pid is None:
            continue
        index, name = by_uuid.get(row[0], (None, ""))
        process = ", ".join(row[2:-1])  # a process name may hold commas
        holders.append(GpuHolder(host, index, name, pid, process, _number(row[-1]), tags.get(row[1])))
    holders.sort(key=lambda h: (h.gpu if h.gpu is not None else -1, h.pid))
    return holders, len(by_uuid)


NO_SMI = "no-nvidia-smi"
NO_SMI_WORDS = "no GPU to look at: nvidia-smi is not on this node (a machine without NVIDIA GPUs or their driver)"


def node_script(stop_run_ids: list[str]) -> str:
    return f"STOP = {json.dumps(sorted(stop_run_ids))}\nNO_SMI = {NO_SMI!r}\n" + NODE_SCRIPT


async def _node(backend: Backend, rank: int, stop: list[str], timeout_s: float) -> NodeHolders:
    info = backend.node_info(rank)
    python = sys.executable if info.local else "python3"
    try:
        ran = await backend.run_script(rank, python, node_script(stop), timeout_s)
    except NodeError as err:
        return NodeHolders(info.label, error=str(err))
    line = next((x for x in reversed(ran.stdout.splitlines()) if x.startswith(MARKER)), None)
    if line is None:
        said = (ran.stderr.strip().splitlines() or [f"exit status {ran.exit_status}"])[-1]
        return NodeHolders(info.label, error=f"the GPU query did not run: {said[:300]}")
    data = json.loads(line[len(MARKER):])
    if data.get("gpus") is None:
        said = data.get("error") or "not found"
        return NodeHolders(info.label, error=NO_SMI_WORDS if said == NO_SMI else f"nvidia-smi: {said}")
    holders, count = parse_holders(info.label, data["gpus"], data.get("apps") or "", data.get("tags") or {})
    return NodeHolders(info.label, tuple(holders), count, stopped=tuple(data.get("stopped") or ()))


async def gpu_holders(backend: Backend, ranks: list[int], stop: Sequence[str] = (), timeout_s: float = 60.0
                      ) -> list[NodeHolders]:
    """Every node's GPU holders at once; with ``stop``, the processes tagged with those run ids are stopped
    (SIGTERM, then SIGKILL after 10 s) before the node answers."""
    try:
        return list(await asyncio.gather(*(_node(backend, r, list(stop), timeout_s) for r in ranks)))
    finally:
        await backend.close()


async def run_gpu_holders(home, run_id: str, stop: bool = False) -> tuple[list[NodeHolders], dict[str, str | None]]:
    """The GPU holders on a run's nodes (its recorded plan), and each holder run's state (``""``: live,
    ``None``: not in this data dir). With ``stop``, the processes of our ended runs there are stopped."""
    from launcher.backends.registry import backend_for
    from launcher.paths import run_dir
    from launcher.runs.core.layout import load_plan
    from launcher.runs.core.store import RunStore

    plan = load_plan(run_dir(home, run_id))
    ranks = [n.node_rank for n in plan.nodes]
    nodes = await gpu_holders(backend_for(plan), ranks)
    states = holder_states(RunStore(home), nodes)
    leftovers = [r for r, state in states.items() if state]
    if stop and leftovers:
        nodes = await gpu_holders(backend_for(plan), ranks, stop=leftovers)
    return nodes, states


def holder_states(store, nodes: list[NodeHolders]) -> dict[str, str | None]:
    """Run id -> its final state (a leftover), ``""`` while it runs, ``None`` when this data dir has no such run."""
    states: dict[str, str | None] = {}
    for run_id in (h.run_id for n in nodes for h in n.holders):
        if not run_id:
            continue
        record = store.get_run(run_id)
        states[run_id] = (None if record is None else
                            record.summary.state.value if record.summary.state.is_final else "")
    return states
