"""Runs over real SSH: one sshd per host (a network namespace each, or a loopback address), host keys
verified, connections dropped."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import (
    FSDP_TUI,
    ROOT,
    cli_env,
    events,
    run_sampling_cmdlines,
    tagged,
    write_workload,
)
from tests.support.ssh_runs import gloo_iface, ssh_cli
from tests.support.sshd import keygen

pytestmark = pytest.mark.slow


def test_air_style_script_on_two_ssh_nodes(home, tmp_path, ns_hosts):
    """The workload names no interface for gloo: the hosts' hostname resolves to a loopback address
    (as 127.0.1.1 on stock Debian/Ubuntu), so the run trains only because each node sets
    GLOO_SOCKET_IFNAME to its interface that reaches MASTER_ADDR; the dry run says so and the doctor
    names that interface per node."""
    import socket

    client, started = ns_hosts
    assert socket.gethostbyname(socket.gethostname()).startswith("127.")  # what makes gloo need it
    wl = write_workload(tmp_path, f"""experiment_name: ssh-byo
mlflow: {{enabled: false}}
compute: {{accelerator_type: CPU, procs_per_node: 1, hosts: [node0, node1]}}  # MASTER_ADDR from ~/.ssh/config
environment: {{python: {sys.executable}}}
code_source: {{type: snapshot, snapshot: {{root_path: {ROOT / 'sample_workloads/byo_script'}}}}}
command: |
  cd "$CODE_SOURCE_PATH"
  python -m torch.distributed.run --nnodes="$NUM_NODES" --node_rank="$NODE_RANK" \\
    --nproc_per_node="$LOCAL_WORLD_SIZE" --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" train.py
env_variables: {{OMP_NUM_THREADS: 1}}
parameters: {{max_steps: 8}}
""")
    dry = ssh_cli(home, client, "run", wl, "--dry-run").stdout
    assert dry.count("GLOO_SOCKET_IFNAME=<the interface that reaches MASTER_ADDR, found on the node>") == 2, dry
    doctor = ssh_cli(home, client, "doctor", wl, "--json")
    iface = gloo_iface(started)
    for node in json.loads(doctor.stdout)["nodes"]:
        check = next(c for c in node["checks"] if c["name"] == "interface")
        assert check["status"] == "ok" and f"NCCL_SOCKET_IFNAME={iface} (" in check["detail"], check
    out = ssh_cli(home, client, "run", wl, "--json")
    evs = events(out.stdout)
    run_id = evs[0]["run_id"]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    steps = [e["record"]["step"] for e in evs if e["type"] == "MetricsRecorded"]
    assert steps == list(range(1, 9))
    hosts_seen = {e["host"] for e in evs if e["type"] == "NodeStateChanged"}
    assert hosts_seen == {"node0", "node1"}
    logs = [(home / "runs" / run_id / "nodes" / f"{rank}.log").read_text() for rank in (0, 1)]
    for log in logs:
        assert f"GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME={iface} (the interface that reaches" in log, log[:2000]
    assert "World size=2" in logs[0]
    assert tagged(run_id) == []


def test_builtin_trainer_over_two_ssh_nodes_two_procs_each(home, tmp_path, ns_hosts):
    """The editor's CPU template for SSH hosts, its two blanks filled, runs as written on two machines (a
    few keys set for the test). The hosts share one home (as an NFS home is): the launch finds that node 1
    sees node 0's checkpoints folder, so every save is whole where the ranks wrote it and nothing is
    gathered (private disks, gathers, export and resume: test_split_checkpoints.py)."""
    from launcher.workload.templates import SSH_BUILTIN_CPU

    client, started = ns_hosts
    wl = write_workload(tmp_path, SSH_BUILTIN_CPU.replace("<host-0>", "node0").replace("<host-1>", "node1"))
    settings = [f"environment.python={sys.executable}", "env_variables.FSDP_TUI_ASSETS=/tmp/fsdp-tui-test-assets",
                f"env_variables.GLOO_SOCKET_IFNAME={gloo_iface(started)}", "parameters.output_dir=~/out_$FSDP_TUI_RUN_ID",
                "parameters.per_device_batch_size=4", "parameters.max_steps=6",
                "parameters.logging={eval_max_batches: 2}", "parameters.checkpoint={every_steps: 3, export_hf: false}"]
    out = ssh_cli(home, client, "run", wl, "--json", *[w for s in settings for w in ("--set", s)])
    evs = events(out.stdout)
    run_id = evs[0]["run_id"]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    train = [e["record"] for e in evs if e["type"] == "MetricsRecorded" and e["record"]["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 7)) and len(train[-1]["memory"]) == 4
    record = json.loads(ssh_cli(home, client, "runs", "--json").stdout)[0]
    assert record["state"] == "succeeded" and record["num_nodes"] == 2
    node1 = (home / "runs" / run_id / "nodes" / "1.log").read_text()  # node 1's pane is alive every step
    assert all(f"node 1 ranks 2-3: step {s}/6 " in node1 for s in range(1, 7)), node1[-2000:]
    node_out = started[0].home / f"out_{run_id}"
    assert not (Path.home() / f"out_{run_id}").exists()
    place = json.loads((home / "runs" / run_id / "plan.json").read_text())["ckpt_place"]
    assert place["kind"] == "shared" and place["roots"] == [str(node_out / "checkpoints")] * 2
    assert not (home / "runs" / run_id / "gathers.jsonl").exists()
    ckpt = json.loads(ssh_cli(home, client, "ckpt", run_id, "--json").stdout)
    assert [(c["step"], c["complete"]) for c in ckpt] == [(3, True), (6, True)]
    assert ckpt[0]["path"] == str(node_out / "checkpoints" / "step-00000003")
    assert sorted(p.name for p in Path(ckpt[1]["path"]).iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp", "meta.json"]


def test_dropped_connection_reconnects_and_loses_no_line(home, tmp_path, ns_hosts):
    client, started = ns_hosts
    wl = write_workload(tmp_path, """experiment_name: ssh-drop
mlflow: {enabled: false}
compute: {hosts: [node0]}
command: |
  for i in $(seq 1 60); do echo "line $i"; sleep 0.1; done
""")
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(client)), cwd=ROOT)
    run_id = None
    for line in proc.stdout:
        event = json.loads(line)
        run_id = event["run_id"]
        if event["type"] == "NodeLines" and any(x.startswith("line 1") for x in event["lines"]):
            break
    killed = started[0].connection_pids()
    assert killed
    subprocess.run(["kill", "-9", *map(str, killed)])  # the TCP connection dies under the launcher
    rest = [json.loads(x) for x in proc.stdout]
    assert proc.wait(timeout=60) == 0, rest[-3:]
    assert rest[-1]["type"] == "RunFinished" and rest[-1]["state"] == "succeeded"
    node_states = [e["state"] for e in rest if e["type"] == "NodeStateChanged"]
    assert node_states[:2] == ["reconnecting", "running"], node_states
    mirror = (home / "runs" / run_id / "nodes" / "0.log").read_text().splitlines()
    assert mirror == [f"line {i}" for i in range(1, 61)]


def test_a_node_without_connection_holds_up_only_itself(home, tmp_path, ns_hosts):
    """node1's connection dies and its sshd stops answering for a while: node0's lines keep arriving."""
    import signal
    import threading

    client, started = ns_hosts
    wl = write_workload(tmp_path, """experiment_name: ssh-outage
mlflow: {enabled: false}
compute: {hosts: [node0, node1]}
command: |
  for i in $(seq 1 80); do echo "line $i"; sleep 0.1; done
""")
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(client)), cwd=ROOT)
    listener = started[1].proc
    resume = threading.Timer(6.0, lambda: listener.send_signal(signal.SIGCONT))
    run_id, outage, during, ended = None, None, 0, None
    try:
        for line in proc.stdout:
            event = json.loads(line)
            run_id = event["run_id"]
            if outage is None and event["type"] == "NodeLines" and event["node_rank"] == 1:
                listener.send_signal(signal.SIGSTOP)  # new connections hang until it is resumed
                subprocess.run(["kill", "-9", *map(str, started[1].connection_pids())])
                outage = time.monotonic()
                resume.start()
            elif event["type"] == "NodeStateChanged" and event["node_rank"] == 1 and outage is not None:
                ended = ended or (event["state"] == "running" and time.monotonic())
            elif event["type"] == "NodeLines" and event["node_rank"] == 0 and outage is not None and not ended:
                during += len(event["lines"])
            elif event["type"] == "RunFinished":
                assert event["state"] == "succeeded", event
        assert proc.wait(timeout=60) == 0
        assert ended and ended - outage > 3  # the outage was real: node1 was away for seconds
        assert during >= 20, f"only {during} of node0's lines arrived while node1 was away"
        for rank in (0, 1):
            mirror = (home / "runs" / run_id / "nodes" / f"{rank}.log").read_text().splitlines()
            job = [line for line in mirror if not line.startswith("fsdp-tui agent: ")]  # its interface note
            assert job == [f"line {i}" for i in range(1, 81)]
    finally:
        resume.cancel()
        listener.send_signal(signal.SIGCONT)
        proc.kill()


def _one_node_workload(tmp_path: Path) -> Path:
    return write_workload(tmp_path, "experiment_name: keys\nmlflow: {enabled: false}\ncompute: {hosts: [node1]}\ncommand: echo never\n")



def test_unknown_host_key_stops_the_launch_and_trust_fixes_it(home, tmp_path, hosts):
    client, started = hosts
    known = client / ".ssh" / "known_hosts"
    known.write_text(started[0].known_hosts_line() + "\n")  # node1 unknown
    out = ssh_cli(home, client, "run", _one_node_workload(tmp_path), "--json")
    assert out.returncode == 2  # refused before anything is recorded
    summary = " ".join(events(out.stdout)[-1]["reasons"])
    assert "unknown host key SHA256:" in summary and "fsdp-tui trust node1" in summary
    assert "nothing was launched" in out.stderr and ssh_cli(home, client, "runs", "--json").stdout.strip() == "[]"
    trusted = ssh_cli(home, client, "trust", "node1", "--yes")
    assert trusted.returncode == 0 and "SHA256:" in trusted.stdout
    out = ssh_cli(home, client, "run", _one_node_workload(tmp_path), "--json")
    assert out.returncode == 0, out.stdout[-2000:]



def test_a_fresh_laptop_without_known_hosts_gets_the_unknown_key_message_and_trust_creates_the_file(
        home, tmp_path, hosts):
    client, started = hosts
    (client / ".ssh" / "known_hosts").unlink()
    out = ssh_cli(home, client, "run", _one_node_workload(tmp_path), "--json")
    assert out.returncode == 2
    summary = " ".join(events(out.stdout)[-1]["reasons"])
    assert "unknown host key SHA256:" in summary and "fsdp-tui trust node1" in summary
    assert "No such file" not in summary
    doctor = json.loads(ssh_cli(home, client, "doctor", _one_node_workload(tmp_path), "--json").stdout)
    reach = doctor["nodes"][0]["checks"][0]
    assert reach["status"] == "error" and "unknown host key SHA256:" in reach["detail"], reach
    assert "No such file" not in reach["detail"]
    trusted = ssh_cli(home, client, "trust", f"{started[1].addr}:{started[1].port}", "--yes")
    assert trusted.returncode == 0, trusted.stderr
    known = client / ".ssh" / "known_hosts"
    assert known.stat().st_mode & 0o777 == 0o600 and (client / ".ssh").stat().st_mode & 0o777 == 0o700
    down = ssh_cli(home, client, "trust", "127.0.0.9:1", "--yes")
    assert down.returncode == 1 and "cannot reach 127.0.0.9:1" in down.stderr and "ssh 127.0.0.9:1" in down.stderr


def test_changed_host_key_is_a_hard_failure_naming_both_fingerprints(home, tmp_path, hosts):
    client, started = hosts
    other = tmp_path / "impostor"
    keygen(other)
    pub = Path(str(other) + ".pub").read_text().split()
    known = client / ".ssh" / "known_hosts"
    known.write_text(f"[{started[1].addr}]:{started[1].port} {pub[0]} {pub[1]}\n")
    out = ssh_cli(home, client, "run", _one_node_workload(tmp_path), "--json")
    assert out.returncode == 2
    summary = " ".join(events(out.stdout)[-1]["reasons"])
    assert "HOST KEY CHANGED" in summary and summary.count("SHA256:") == 2
    assert not (started[1].home / ".fsdp-tui" / "runs").exists() or not any(
        (started[1].home / ".fsdp-tui" / "runs").iterdir()), "nothing may reach a node with a changed key"


def _two_node_ticker(tmp_path: Path, body: str) -> Path:
    return write_workload(tmp_path, f"""experiment_name: ssh-faults
mlflow: {{enabled: false}}
compute: {{hosts: [node0, node1]}}
command: |
{body}  while true; do echo "tick $NODE_RANK"; sleep 0.2; done
""")


def _until_both_tick(proc: subprocess.Popen) -> str:
    run_id, seen = None, set()
    for line in proc.stdout:
        event = json.loads(line)
        run_id = event["run_id"]
        if event["type"] == "NodeLines":
            seen |= {x for x in event["lines"] if x.startswith("tick")}
            if {"tick 0", "tick 1"} <= seen:
                return run_id
    raise AssertionError(f"run {run_id} ended before both nodes ticked")


def test_killed_node_process_stops_every_node_and_triage_names_it(home, tmp_path, ns_hosts):
    client, _ = ns_hosts
    wl = _two_node_ticker(tmp_path, f'  echo $$ > {tmp_path}/job-$NODE_RANK.pid\n')
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(client)), cwd=ROOT)
    run_id = _until_both_tick(proc)
    subprocess.run(["kill", "-9", (tmp_path / "job-1.pid").read_text().strip()], check=True)
    rest = [json.loads(x) for x in proc.stdout]
    assert proc.wait(timeout=60) == 1
    end = rest[-1]
    assert end["type"] == "RunFinished" and end["state"] == "failed"
    assert end["triage"]["node_rank"] == 1 and end["triage"]["signature"] == "killed", end["triage"]
    stopped = {e["node_rank"]: e["state"] for e in rest if e["type"] == "NodeStateChanged"}
    assert stopped[0] == "stopped", stopped
    assert tagged(run_id) == []


def test_cancel_from_another_process_leaves_nothing_on_any_node(home, tmp_path, ns_hosts):
    client, _ = ns_hosts
    wl = _two_node_ticker(tmp_path, '  setsid sleep 300 &\n  ( sleep 301 & ) &\n')
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(client)), cwd=ROOT)
    run_id = _until_both_tick(proc)
    assert len(tagged(run_id)) >= 6
    out = ssh_cli(home, client, "cancel", run_id)
    assert out.returncode == 0, out.stdout + out.stderr
    assert tagged(run_id) == []
    rest = [json.loads(x) for x in proc.stdout]
    assert proc.wait(timeout=30) == 130, [e for e in rest if e["type"] != "NodeLines"]
    assert rest[-1]["type"] == "RunFinished" and rest[-1]["state"] == "cancelled"


SHOW = """import hashlib, json, os, sys, yaml
env = {k: v for k, v in os.environ.items() if k.startswith("HOSTILE_")}
print("ENV", json.dumps(env))
print("PARAMS", json.dumps(yaml.safe_load(open(os.environ["HYPERPARAMETERS_PATH"]))))
token = os.environ["API_TOKEN"]
print("token is", token)
print("token-ok" if hashlib.sha256(token.encode()).hexdigest() == sys.argv[1] else "token-wrong")
"""


def test_hostile_strings_and_a_canary_secret_over_ssh(home, tmp_path, ns_hosts):
    """Env values, parameters and paths (the nodes' run root, the code folder) full of shell syntax cross
    SSH byte for byte and run nothing; the secret reaches the job and nothing else."""
    import hashlib

    import yaml

    from tests.support.hostile import HOSTILE

    client, started = ns_hosts
    canary = "canary-5b1d0e77aa"
    remote = tmp_path / "remote it's $(touch PWNED) `touch PWNED` dir"
    code = tmp_path / "code; touch PWNED & 'q' \"dq\""
    code.mkdir()
    (code / "show.py").write_text(SHOW)
    env = {f"HOSTILE_{i}": v for i, v in enumerate(HOSTILE)}
    params = {"values": HOSTILE, "-dash-key": "$(touch PWNED)"}
    doc = {"experiment_name": "ssh-hostile", "mlflow": {"enabled": False}, "compute": {"hosts": ["node0", "node1"]},
           "ssh": {"remote_root": str(remote)}, "environment": {"python": sys.executable},
           "code_source": {"type": "snapshot", "snapshot": {"root_path": str(code)}},
           "command": f'python "$CODE_SOURCE_PATH/show.py" {hashlib.sha256(canary.encode()).hexdigest()}',
           "env_variables": env, "parameters": params, "secrets": {"API_TOKEN": "team/api"}}
    wl = write_workload(tmp_path, yaml.safe_dump(doc, allow_unicode=True))
    code, out, cmdlines = run_sampling_cmdlines(home, wl, 120, HOME=str(client), FSDP_TUI_SECRET_TEAM_API=canary)
    assert code == 0, out[-3000:]
    run_id = events(out)[0]["run_id"]
    for rank in (0, 1):
        log = (home / "runs" / run_id / "nodes" / f"{rank}.log").read_text().splitlines()
        assert json.loads(next(x for x in log if x.startswith("ENV "))[4:]) == env
        assert json.loads(next(x for x in log if x.startswith("PARAMS "))[7:]) == params
        assert "token is ******" in log and "token-ok" in log
        assert (remote / "runs" / run_id / f"node-{rank}" / "node.log").is_file()
    assert not [p for root in (ROOT, home, tmp_path) for p in Path(root).rglob("PWNED")]
    assert not (started[0].home / "PWNED").exists()  # where a login shell on the nodes would have run it
    assert canary not in out and all(canary.encode() not in c for c in cmdlines)
    for root in (home, remote):
        for path in Path(root).rglob("*"):
            if path.is_file():
                assert canary.encode() not in path.read_bytes(), path


async def test_connections_prefer_aes_gcm_unless_the_config_names_ciphers(hosts, monkeypatch):
    from launcher.backends.ssh.connect import connect
    from launcher.workload.hosts import parse_host
    from launcher.workload.machines import Ssh

    client, _ = hosts
    monkeypatch.setenv("HOME", str(client))
    async with await connect(parse_host("node0"), Ssh()) as conn:
        assert conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
    config = client / ".ssh" / "config"
    config.write_text("Host *\n  Ciphers chacha20-poly1305@openssh.com\n\n" + config.read_text())
    async with await connect(parse_host("node0"), Ssh()) as conn:
        assert conn.get_extra_info("send_cipher") == "chacha20-poly1305@openssh.com"


def test_a_node_that_cannot_run_the_agent_is_named_at_once(home, tmp_path, hosts):
    """A wrong environment.python or an unwritable run root fails the launch in seconds, saying why."""
    client, _ = hosts
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    for section, expect in ((f"environment: {{python: {tmp_path}/no/python3}}", "No such file"),
                            (f"ssh: {{remote_root: {blocker}}}", "Not a directory")):
        wl = write_workload(tmp_path, f"experiment_name: no-agent\nmlflow: {{enabled: false}}\ncompute: {{hosts: [node0]}}\n{section}\n"
                                      "command: echo never\n")
        out = ssh_cli(home, client, "run", wl, "--json", timeout=120)
        end = events(out.stdout)[-1]
        assert out.returncode == 1 and end["state"] == "failed", out.stdout[-2000:]
        assert "node 0 (node0): the agent could not start" in end["triage"]["summary"]
        assert expect in end["triage"]["summary"]


def test_a_chatty_login_before_the_agent_is_skipped(home, tmp_path, hosts):
    """An interpreter wrapper (or rc file) printing to stdout before the agent starts does not confuse it."""
    client, _ = hosts
    noisy = tmp_path / "bin" / "python3"
    noisy.parent.mkdir()
    noisy.write_text(f"#!/bin/sh\necho 'Welcome! 3 updates are available.'\nexec {sys.executable} \"$@\"\n")
    noisy.chmod(0o755)
    wl = write_workload(tmp_path, f"experiment_name: chatty\nmlflow: {{enabled: false}}\ncompute: {{hosts: [node0]}}\n"
                                  f"environment: {{python: {noisy}}}\ncommand: echo hello from $NODE_RANK\n")
    out = ssh_cli(home, client, "run", wl, "--json", timeout=60)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [line for e in events(out.stdout) if e["type"] == "NodeLines" for line in e["lines"]]
    assert lines == ["hello from 0"]


def test_a_node_away_past_the_window_is_lost_and_fails_the_run_naming_it(home, tmp_path, ns_hosts):
    """node1's sshd and its connections die and stay dead longer than ``ssh.lost_after_s``: node1 is LOST
    (its record and its badge in the monitor), the run fails naming it, node0 is stopped. Once node1 is
    back, the next command stops the job still running there and says so."""
    import asyncio
    import signal

    client, started = ns_hosts
    wl = write_workload(tmp_path, """experiment_name: ssh-lost
mlflow: {enabled: false}
compute: {hosts: [node0, node1]}
ssh: {lost_after_s: 4}
command: |
  while true; do echo "tick $NODE_RANK"; sleep 0.2; done
""")
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(client)), cwd=ROOT)
    run_id = _until_both_tick(proc)
    try:
        connections = started[1].connection_pids()
        assert connections
        started[1].proc.send_signal(signal.SIGKILL)  # node1's sshd goes away, with every connection
        subprocess.run(["kill", "-9", *map(str, connections)])
        rest = [json.loads(x) for x in proc.stdout]
        assert proc.wait(timeout=90) == 1
        end = rest[-1]
        assert end["type"] == "RunFinished" and end["state"] == "failed"
        assert "node 1 (node1): lost: no connection for 4 s" in end["triage"]["summary"], end["triage"]
        changes = [(e["state"], e.get("detail", "")) for e in rest if e["type"] == "NodeStateChanged"
                   and e["node_rank"] == 1]
        states = [state for state, _ in changes]
        assert states[:1] == ["reconnecting"] and "lost" in states and states[-1] == "lost", changes
        record = json.loads(ssh_cli(home, client, "runs", "--json").stdout)[0]
        assert record["state"] == "failed"
        from launcher.runs.core.store import RunStore

        nodes = {n.node_rank: n for n in RunStore(home).get_run(run_id).nodes}
        assert nodes[1].state.value == "lost" and nodes[0].state.value == "stopped"

        from tests.support.tui import wait_for
        from tui.app import FsdpTuiApp

        async def badge() -> str:
            app = FsdpTuiApp(home, run_id=run_id)
            async with app.run_test(size=(140, 40)) as pilot:
                await wait_for(pilot, lambda: type(app.screen).__name__ == "RunMonitorScreen"
                               and app.screen.view.state.value == "failed")
                pane = app.screen.pane(1)
                await wait_for(pilot, lambda: pane.state is not None and pane.state.value == "lost")
                return pane.badge.plain

        assert "lost" in asyncio.run(badge()).lower()

        assert tagged(run_id)  # nothing could reach node1 to stop its job
        started[1].restart()
        deadline = time.monotonic() + 60
        said = ""
        while "lost during the run" not in said and time.monotonic() < deadline:
            said = ssh_cli(home, client, "runs").stderr
            time.sleep(1)
        assert "node 1 (node1) (lost during the run): it is back; the run's processes still running there " \
               "were stopped" in said, said
        assert tagged(run_id) == []
        assert "bytes it logged while away were added to the record" in said, said
        node_log = next(started[1].home.glob(f".fsdp-tui/runs/{run_id}/node-1/node.log"))
        assert (home / "runs" / run_id / "nodes" / "1.log").read_bytes() == node_log.read_bytes()
        again = ssh_cli(home, client, "runs")
        assert "lost during the run" not in again.stderr  # told once
        nodes = {n.node_rank: n for n in RunStore(home).get_run(run_id).nodes}
        assert nodes[1].state.value == "lost" and "were stopped" in nodes[1].detail
    finally:
        proc.kill()
        owner = home / "runs" / run_id / "owner.lock"
        if owner.exists() and owner.read_text().strip():
            subprocess.run(["kill", "-9", owner.read_text().strip()], capture_output=True)
        for pid in tagged(run_id):  # node1's job: nothing could reach it to stop it
            subprocess.run(["kill", "-9", str(pid)])


def test_a_node_without_sftp_gets_its_code_and_trainer_over_the_agent_channel(home, tmp_path):
    """A hardened sshd with no SFTP subsystem: the code snapshot and the shipped trainer still arrive
    (size- and hash-checked through the agent), and the job runs."""
    from tests.support.sshd import start_hosts, stop_hosts

    try:
        client, started = start_hosts(tmp_path, 1, sftp=False)
    except RuntimeError as err:
        pytest.skip(str(err))
    try:
        code = tmp_path / "code"
        code.mkdir()
        (code / "hello.py").write_text("import os\nprint('hello from', os.environ['NODE_RANK'])\n")
        wl = write_workload(tmp_path, f"""experiment_name: no-sftp
mlflow: {{enabled: false}}
compute: {{hosts: [node0]}}
environment: {{python: {sys.executable}}}
code_source: {{type: snapshot, snapshot: {{root_path: {code}}}}}
command: python "$CODE_SOURCE_PATH/hello.py"
""")
        out = ssh_cli(home, client, "run", wl, "--json", timeout=120)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        lines = [line for e in events(out.stdout) if e["type"] == "NodeLines" for line in e["lines"]]
        assert lines == ["hello from 0"]
    finally:
        stop_hosts(started)


async def test_the_editors_plan_tab_glances_at_each_host(home, tmp_path, hosts, monkeypatch):
    """Reachable with a known key, or why not, beside each node; nothing starts on the hosts."""
    from tests.support.tui import wait_for
    from tui.app import FsdpTuiApp
    from tui.screens.editor import EditorScreen

    client, started = hosts
    with (client / ".ssh" / "config").open("a") as f:
        f.write("\nHost ghost\n  HostName 127.0.0.250\n  Port 1\n")
    monkeypatch.setenv("HOME", str(client))
    wl = write_workload(tmp_path, "experiment_name: glance\nmlflow: {enabled: false}\ncompute: {hosts: [node0, ghost]}\ncommand: echo hi\n")
    app = FsdpTuiApp(home, workload=wl)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        reach = app.screen.query_one("#reach")
        await wait_for(pilot, lambda: "node 1 (ghost)" in str(reach.render()), timeout=60)
        text = str(reach.render())
    assert "✓ node 0 (node0): reachable, host key known" in text, text
    assert "✗ node 1 (ghost): " in text, text
    assert not list((started[0].home).glob(".fsdp-tui/runs/*")), "a glance starts nothing on the node"


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def test_a_host_that_hangs_is_noticed_by_keepalive_and_lost(home, tmp_path, ns_hosts):
    """node1's sshd, listener and connections, is stopped (not killed): its TCP connections stay up and
    nothing answers. Keepalives (here every 1 s, 3 missed) notice it within seconds, not minutes; after
    ``lost_after_s`` node1 is lost and the run fails saying for how long it had no connection."""
    import os
    import signal

    client, started = ns_hosts
    wl = write_workload(tmp_path, """experiment_name: ssh-hung
mlflow: {enabled: false}
compute: {hosts: [node0, node1]}
ssh: {keepalive_interval_s: 1, keepalive_count_max: 3, connect_timeout_s: 2, lost_after_s: 5}
command: |
  while true; do echo "tick $NODE_RANK"; sleep 0.2; done
""")
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(client)), cwd=ROOT)
    run_id = _until_both_tick(proc)
    hung = _tree(started[1].proc.pid)
    try:
        began = time.monotonic()
        for pid in hung:
            os.kill(pid, signal.SIGSTOP)
        noticed, rest = None, []
        for line in proc.stdout:
            event = json.loads(line)
            rest.append(event)
            if (noticed is None and event["type"] == "NodeStateChanged" and event["node_rank"] == 1
                    and event["state"] == "reconnecting"):
                noticed = time.monotonic() - began
        assert proc.wait(timeout=90) == 1
        assert noticed is not None and noticed < 20, noticed  # 3 s of keepalives, room for a busy machine
        assert "node 1 (node1): lost: no connection for 5 s" in rest[-1]["triage"]["summary"], rest[-1]
    finally:
        for pid in hung:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        proc.kill()
        owner = home / "runs" / run_id / "owner.lock"
        if owner.exists() and owner.read_text().strip():
            subprocess.run(["kill", "-9", owner.read_text().strip()], capture_output=True)
        for pid in tagged(run_id):
            subprocess.run(["kill", "-9", str(pid)])
