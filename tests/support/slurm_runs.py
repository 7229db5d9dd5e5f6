"""The CLI against the real SLURM test cluster (``slurm``, ``slurm_module`` in tests/support/cli.py): commands
run with the cluster's client HOME (it reaches the login node over SSH), a workload for the cluster, what the
job leaves in the nodes' ``job_dir``, and its processes on each node."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.cli import FSDP_TUI, ROOT, cli_env, wait_until, write_workload

ASSETS = "/tmp/fsdp-tui-test-assets"


def slurm_cli(home: Path, cluster, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([FSDP_TUI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(home, HOME=str(cluster.client_home)), cwd=ROOT)


def slurm_popen(home: Path, cluster, *args: str) -> subprocess.Popen:
    return subprocess.Popen([FSDP_TUI, *map(str, args)], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(cluster.client_home)), cwd=ROOT)


def workload(tmp: Path, cluster, body: str, *, slurm: str = "", procs: int = 1) -> Path:
    """A workload for the cluster. MLflow off: the owner logs a run the same way on every backend, and the
    local runs check it (an owner that logs costs three seconds of CPU more)."""
    return write_workload(tmp, f"""experiment_name: slurm-test
mlflow: {{enabled: false}}
compute:
  accelerator_type: CPU
  procs_per_node: {procs}
  num_accelerators: {2 * procs}
  slurm: {{login: {cluster.login_alias}, partition: {cluster.partition}, job_dir: {cluster.job_dir}{slurm}}}
environment: {{python: {sys.executable}}}
env_variables: {{OMP_NUM_THREADS: 1, GLOO_SOCKET_IFNAME: eth0, FSDP_TUI_ASSETS: {ASSETS}}}
{body}""")


def node_file(cluster, run_id: str, rank: int, name: str) -> Path:
    return Path(cluster.job_dir) / run_id / f"node-{rank}" / name


def wait_said(home: Path, run_id: str, words: str, timeout: float = 120) -> list:
    """Until a state transition of the run says ``words``; its transitions."""
    from launcher.runs.core.store import RunStore

    store = RunStore(home)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = store.get_run(run_id)
        if record is not None and any(words in t[3] for t in record.transitions):
            return record.transitions
        time.sleep(0.2)
    raise AssertionError(f"{run_id} never said {words!r}: {store.get_run(run_id).transitions[-5:]}")


def first_event(proc: subprocess.Popen) -> str:
    return json.loads(proc.stdout.readline())["run_id"]


def job_of(cluster, run_id: str, attempt: str = "1") -> str:
    """The SLURM job id of the run's ``attempt``, once it is submitted."""
    jobs = node_file(cluster, run_id, 0, "jobs.json")
    return wait_until(lambda: jobs.exists() and json.loads(jobs.read_text()).get(attempt), 90, "the job was submitted")


def node_pids(cluster, job_id: str, node_id: int) -> list[int]:
    """The job's processes on node ``node_id`` (its task's ``SLURM_NODEID``)."""
    mine = f"SLURM_NODEID={node_id}".encode()
    out = []
    for pid in cluster.job_pids(job_id):
        try:
            if mine in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                out.append(pid)
        except OSError:
            continue
    return out


# A script that checkpoints every 3 steps (one file per node, in the shared node-0 folder where every node
# works) and resumes from there, as the built-in trainer does (its own resume is tested elsewhere).
RESUMING = r"""command: |
  start=$(cat ckpt-$NODE_RANK 2>/dev/null || echo 0)
  if [ "$start" -gt 0 ]; then echo "resumed from step $start"; fi
  for i in $(seq $((start + 1)) 12); do
    echo "step $i of node $NODE_RANK"
    if [ "$NODE_RANK" = 0 ]; then echo '{"step": '$i', "loss": 1.0}' >> "$FSDP_TUI_METRICS_FILE"; fi
    if [ $((i % 3)) = 0 ]; then echo $i > ckpt-$NODE_RANK; fi
    sleep 0.5
  done
"""
