"""``fsdp-tui nettest`` when a node cannot be reached or the rendezvous port cannot be bound, for real: two
SSH hosts in network namespaces (tests/support/sshd.py), an alias to an address nobody listens on, and a
listener holding the workload's port on node 0. The fault is named with what to do, the other nodes are
tested where they can be, the exit status is 1, the deadlines are stated, and nothing is left running."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli_env, tagged, write_workload

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nettest")]


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    """node0, node1 (namespace hosts) and ``ghost``: node0's address on a port nobody listens on."""
    from tests.support.sshd import start_hosts, stop_hosts

    tmp = tmp_path_factory.mktemp("nettest-faults")
    try:
        client, hosts = start_hosts(tmp, 2, netns=True)
    except RuntimeError as err:
        pytest.skip(str(err))
    with open(client / ".ssh" / "config", "a") as f:
        f.write(f"\nHost ghost\n  HostName {hosts[0].addr}\n  Port 2999\n  User root\n"
                f"  IdentityFile {client / '.ssh' / 'id_ed25519'}\n")
    yield client, hosts
    stop_hosts(hosts)


def nettest(home, client, workload, *flags):
    out = subprocess.run([FSDP_TUI, "nettest", str(workload), "--quick", "--max-size", "1", "--phase-deadline", "60",
                          "--json", *flags], capture_output=True, text=True, timeout=300,
                         env=cli_env(home, HOME=str(client)), cwd=ROOT)
    assert out.stdout.strip(), out.stderr[-3000:]
    return out.returncode, json.loads(out.stdout), out.stderr


def workload(tmp_path, hosts: str, extra: str = ""):
    return write_workload(tmp_path, f"""experiment_name: nettest-fault
compute: {{accelerator_type: CPU, procs_per_node: 1, hosts: [{hosts}]{extra}}}
environment: {{python: {sys.executable}}}
env_variables: {{OMP_NUM_THREADS: 1, GLOO_SOCKET_IFNAME: eth0}}
command: "true"
""")


def test_an_unreachable_node_is_named_and_the_others_are_still_tested(home, tmp_path, two_hosts):
    client, _hosts = two_hosts
    code, data, err = nettest(home, client, workload(tmp_path, "node0, ghost, node1"))
    assert code == 1, data
    assert len(data["unreachable"]) == 1, data["unreachable"]
    line = data["unreachable"][0]
    assert line.startswith("node 1 (ghost): not reached within the connect phase (15 s): ") and "ssh ghost" in line
    assert f"fsdp-tui nettest: {line}" in err
    # the two others are measured, as a test of two nodes
    assert data["nodes"] == ["node0", "node1"] and data["nnodes"] == 2 and data["pairs"][0]["busbw"] > 0
    assert data["problems"][1] == "the test ran on the other 2 nodes, numbered among themselves"
    assert data["deadlines_s"]["connect"] == 15 and data["deadlines_s"]["each measuring phase"] == 60
    assert "deadlines: connect 15 s, each measuring phase 60 s, whole test " in err
    assert tagged(data["run_id"]) == []


def test_a_held_rendezvous_port_is_named_with_what_to_do(home, tmp_path, two_hosts):
    client, hosts = two_hosts
    holder = subprocess.Popen(["ip", "netns", "exec", hosts[0].netns, sys.executable, "-c",
                               "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 29555)); s.listen(); "
                               "print('listening', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "listening"
        code, data, _err = nettest(home, client, workload(tmp_path, "node0, node1", ", master_port: 29555"))
        assert code == 1 and "figures" not in data, data
        first = data["problems"][0]
        assert "node 0 (node0): rendezvous port 29555 (compute.master_port) is in use" in first
        assert "--set compute.master_port=" in first and "ss -ltnp 'sport = :29555'" in first
        assert "node 1 (node1): not started: the test stopped before its job began (see above)" in data["problems"]
        assert data["unreachable"] == [] and data["deadlines_s"]["connect"] == 15
        assert tagged(data["run_id"]) == [] and holder.poll() is None
    finally:
        holder.kill()
        holder.wait()
