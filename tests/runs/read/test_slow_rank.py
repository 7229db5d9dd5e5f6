"""A slow node, for real: four SSH namespace hosts run the built-in trainer, one host's processes in a
cgroup (v1 cpu controller) with a small CPU quota; ``show`` flags that node's rank and no other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.runs.read.ranks import WINDOW_STEPS
from tests.support.cli import FSDP_TUI, ROOT, cli_env, write_workload

pytestmark = pytest.mark.slow

CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
QUOTA_US = 5_000
"""5% of one core per 100 ms for the slow node's job (its torchrun and its rank): below what a rank gets
of this machine's two cores even while other tests run beside it."""
SLOW_NODE = 3


@pytest.fixture
def four_ns_hosts(tmp_path):
    from tests.support.sshd import start_hosts, stop_hosts

    try:
        client, started = start_hosts(tmp_path, 4, netns=True)
    except RuntimeError as err:
        pytest.skip(str(err))
    yield client, started
    stop_hosts(started)


@pytest.fixture
def slow_cgroup():
    """A cpu cgroup of this test's own; whatever is in it goes back to the root group at the end."""
    if not (CPU_CGROUPS / "cpu.cfs_quota_us").exists() or not os.access(CPU_CGROUPS, os.W_OK):
        pytest.skip("no writable cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    group = CPU_CGROUPS / f"fsdp-tui-slow-{os.getpid()}"
    group.mkdir()
    (group / "cpu.cfs_period_us").write_text("100000")
    (group / "cpu.cfs_quota_us").write_text(str(QUOTA_US))
    yield group
    for _ in range(100):  # a process still exiting holds the group a moment
        for pid in (group / "cgroup.procs").read_text().split():
            try:
                (CPU_CGROUPS / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # it has exited meanwhile
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the test's cgroup {group} still holds {(group / 'cgroup.procs').read_text().split()}")


def _node_processes(run_id: str, node_rank: int) -> list[int]:
    """Live processes of the run's job on one node (its tag and its NODE_RANK in their environment)."""
    needles = {f"FSDP_TUI_RUN_ID={run_id}".encode(), f"NODE_RANK={node_rank}".encode()}
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needles <= set((entry / "environ").read_bytes().split(b"\0")):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _first_metrics(home: Path, proc: subprocess.Popen) -> Path:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        for path in (home / "runs").glob("*/metrics.jsonl"):
            if path.stat().st_size:
                return path
        time.sleep(0.1)  # polling a file the run's owner appends to
    raise AssertionError(f"no metrics from the run: {proc.communicate()[1][-2000:]}")


@pytest.mark.xdist_group("cpu-cgroup")
def test_a_throttled_node_is_flagged_as_slow_ranks(home, tmp_path, four_ns_hosts, slow_cgroup):
    """The node is throttled once it trains (a throttled start-up would only make the test long)."""
    from tests.support.switches import NS_IFACE

    client, _ = four_ns_hosts
    steps = WINDOW_STEPS + 6  # the flag's window, and the steps made before the throttle bites
    wl = write_workload(tmp_path, f"""experiment_name: slow-node
compute: {{accelerator_type: CPU, procs_per_node: 1, num_accelerators: 4, hosts: [node0, node1, node2, node3]}}
mlflow: {{enabled: false}}
environment: {{python: {sys.executable}}}
env_variables: {{OMP_NUM_THREADS: 1, FSDP_TUI_ASSETS: /tmp/fsdp-tui-test-assets, GLOO_SOCKET_IFNAME: {NS_IFACE}}}
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: ~/out_$FSDP_TUI_RUN_ID
  max_seq_len: 64
  per_device_batch_size: 2
  max_steps: {steps}
  model: {{from_scratch: true}}
  logging: {{eval_max_batches: 1}}
  checkpoint: {{save_final: false, export_hf: false}}
""")
    env = cli_env(home, HOME=str(client))
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)
    try:
        records = _first_metrics(home, proc)  # the record's copy of rank 0's metrics: training has begun
        run_id = records.parent.name
        throttled = _node_processes(run_id, SLOW_NODE)
        for pid in throttled:
            (slow_cgroup / "cgroup.procs").write_text(str(pid))
        at_step = len(records.read_text().splitlines())
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(throttled) >= 2, throttled  # the node's torchrun and its rank at least
    shown = subprocess.run([FSDP_TUI, "show", run_id, "--json"], capture_output=True, text=True, timeout=120,
                           env=env, cwd=ROOT)
    ranks = json.loads(shown.stdout)["ranks"]
    slow = {s["rank"]: s for s in ranks["slow"]}
    assert sorted(slow) == [SLOW_NODE], (at_step, ranks)  # that node's rank (one a node: start-up is most of the cost)
    assert all(s["node"] == SLOW_NODE and s["steps"] == WINDOW_STEPS for s in slow.values())
    text = subprocess.run([FSDP_TUI, "show", run_id], capture_output=True, text=True, timeout=120, env=env,
                          cwd=ROOT).stdout
    assert f"  slow      rank {SLOW_NODE} on node {SLOW_NODE} +" in text, text
