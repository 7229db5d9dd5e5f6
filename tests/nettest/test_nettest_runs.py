"""``fsdp-tui nettest`` for real: torchrun with gloo on this machine, and on three SSH hosts in network
namespaces whose links are shaped with ``tc`` (tbf), one of them to 1/5 of the others."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli, cli_env, tagged, write_workload

# One worker runs them one after the other: collectives timed on 2 cores need the cores.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nettest")]


def test_local_two_processes_give_a_report_and_a_kept_record(home, tmp_path):
    wl = write_workload(tmp_path, f"""experiment_name: nettest-local
compute: {{accelerator_type: CPU, procs_per_node: 2}}
environment: {{python: {sys.executable}}}
env_variables: {{OMP_NUM_THREADS: 1}}
command: "true"
""")
    out = cli(home, "nettest", wl, "--quick", "--max-size", "2", "--json", timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert (data["backend"], data["nnodes"], data["local_world_size"]) == ("gloo", 1, 2)
    figures = {(f["scope"], f["op"], f["bytes"]) for f in data["figures"]}
    scope = "whole world = inside node 0 (this machine)"
    assert figures == {(scope, op, size) for op in ("all_gather", "reduce_scatter", "all_reduce")
                       for size in (1 << 20, 2 << 20)}
    world_ag = [f for f in data["figures"] if f["scope"] == scope and f["op"] == "all_gather"][-1]
    assert world_ag["busbw"] == pytest.approx(world_ag["algbw"] / 2) and world_ag["busbw"] > 0
    assert data["verdict"]["note"].startswith("one node") and data["pairs"] == []
    assert tagged(data["run_id"]) == []

    kept = json.loads(cli(home, "nettests", "--json").stdout)
    assert [k["run_id"] for k in kept] == [data["run_id"]] and kept[0]["result"]["nnodes"] == 1
    text = cli(home, "nettests").stdout
    assert data["run_id"] in text and "one node" in text
    runs = json.loads(cli(home, "runs", "--json").stdout)
    assert runs[0]["run_id"] == data["run_id"] and runs[0]["experiment"] == "nettest-nettest-local"


def nettest_worker(node_rank: int, experiment: str = "nettest-down") -> int | None:
    """The pid of a nettest worker process (not its torchrun) of node ``node_rank`` of this test's own run
    (its run id names ``experiment``: other tests may run nettests beside it), if one is running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ours = any(e.startswith(b"FSDP_TUI_RUN_ID=") and f"-{experiment}-".encode() in e for e in env)
        if ours and b"nettest.py" in cmd and b"torch.distributed.run" not in cmd \
                and f"NODE_RANK={node_rank}".encode() in env and any(e.startswith(b"LOCAL_RANK=") for e in env):
            return int(entry.name)
    return None


def test_a_node_down_mid_test_is_named_and_nothing_is_left_running(home, tmp_path):
    """Two nodes on this machine (no SSH); node 1's worker is killed while the test runs."""
    wl = write_workload(tmp_path, f"""experiment_name: nettest-down
compute: {{accelerator_type: CPU, procs_per_node: 1, hosts: [localhost, localhost]}}
environment: {{python: {sys.executable}}}
env_variables: {{OMP_NUM_THREADS: 1}}
command: "true"
""")
    proc = subprocess.Popen([FSDP_TUI, "nettest", str(wl), "--max-size", "64", "--phase-deadline", "60", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(home), cwd=ROOT)
    deadline = time.monotonic() + 120
    while (pid := nettest_worker(1)) is None:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, out + err
    data = json.loads(out)
    assert data["state"] == "failed" and any(p.startswith("node 1 (localhost): ") for p in data["problems"]), data
    assert f"fsdp-tui logs {data['run_id']}" in data["problems"][-1]
    assert tagged(data["run_id"]) == []
    kept = json.loads(cli(home, "nettests", "--json").stdout)
    assert kept[0]["run_id"] == data["run_id"] and kept[0]["problems"] == data["problems"]


def shape(hosts, rates_mbit: list[int]) -> None:
    """Both directions of each host's link: the bridge's end of its veth (into the host) and its eth0 (out)."""
    for i, (h, rate) in enumerate(zip(hosts, rates_mbit, strict=True)):
        tbf = ["root", "tbf", "rate", f"{rate}mbit", "burst", "32kb", "latency", "100ms"]
        subprocess.run(["tc", "qdisc", "replace", "dev", h.switch.veth(i), *tbf], check=True)
        subprocess.run(["ip", "netns", "exec", h.netns, "tc", "qdisc", "replace", "dev", "eth0", *tbf], check=True)


def test_three_hosts_even_names_none_then_the_throttled_host_only(home, tmp_path):
    from tests.support.sshd import start_hosts, stop_hosts

    try:
        client, hosts = start_hosts(tmp_path, 3, netns=True)
    except RuntimeError as err:
        pytest.skip(str(err))
    try:
        try:
            shape(hosts, [400, 400, 400])
        except subprocess.CalledProcessError as err:
            pytest.skip(f"tc cannot shape links here: {err}")
        wl = write_workload(tmp_path, f"""experiment_name: nettest-ssh
compute: {{accelerator_type: CPU, procs_per_node: 1, hosts: [node0, node1, node2]}}
environment: {{python: {sys.executable}}}
env_variables: {{OMP_NUM_THREADS: 1, GLOO_SOCKET_IFNAME: eth0}}
command: "true"
""")

        def nettest():
            out = subprocess.run([FSDP_TUI, "nettest", str(wl), "--quick", "--max-size", "1", "--json"],
                                 capture_output=True, text=True, timeout=300, env=cli_env(home, HOME=str(client)),
                                 cwd=ROOT)
            assert out.stdout.strip(), out.stderr[-3000:]
            return out.returncode, json.loads(out.stdout)

        code, even = nettest()
        assert code == 0 and even["verdict"]["findings"] == [], even["pairs"]
        assert [(p["a"], p["b"]) for p in even["pairs"]] == [(0, 1), (1, 2), (0, 2)]
        assert "no slow node or link" in even["verdict"]["text"][0]
        assert tagged(even["run_id"]) == []

        shape(hosts, [400, 400, 80])
        code, slow = nettest()
        assert code == 1, slow
        assert slow["verdict"]["slow_nodes"] == [{"node": 2, "host": "node2"}]
        assert [f["kind"] for f in slow["verdict"]["findings"]] == ["node"]
        finding = slow["verdict"]["findings"][0]
        assert finding["ratio"] < 0.5  # 80 against 400 Mbit: about 0.2
        assert slow["verdict"]["text"][0].startswith("slow node: node 2 (node2): ")
        assert tagged(slow["run_id"]) == []
    finally:
        stop_hosts(hosts)


def test_the_two_node_slurm_cluster_gives_the_same_report(home, tmp_path, slurm):
    from tests.support.slurm_runs import slurm_cli, workload

    wl = workload(tmp_path, slurm, 'command: "true"\n')
    out = slurm_cli(home, slurm, "nettest", wl, "--quick", "--max-size", "1", "--json")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert (data["backend"], data["nnodes"], data["local_world_size"]) == ("gloo", 2, 1)
    assert {f["scope"] for f in data["figures"]} == {"whole world = across nodes"}
    assert [(p["a"], p["b"]) for p in data["pairs"]] == [(0, 1)] and data["verdict"]["note"].startswith("two nodes")
    assert data["nodes"][0].startswith("SLURM node 0 via ")
