"""A bad day on real parts: launches at the same instant on the same SSH hosts (a network namespace each)
with tracking servers that are dead; a node whose processes are all killed and whose sshd restarts, as in
a reboot; two workloads on one ``output_dir``; an alias bomb through ``--set`` under a memory limit; a
60 MB log read from its end; the data dir private whatever the umask."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from launcher.events import RunState
from launcher.runs.core.ownership import owned
from launcher.runs.core.pending import why_pending
from launcher.runs.core.store import RunStore
from tests.support.cli import FSDP_TUI, ROOT, cli_env, events, tagged, wait_until
from tests.support.processes import namespace_pids, send

pytestmark = pytest.mark.slow

RENDEZVOUS = """\
import os, socket, sys, time
port, me = int(os.environ["MASTER_PORT"]), os.environ["FSDP_TUI_RUN_ID"].encode()
if os.environ["NODE_RANK"] == "0":  # as torchrun's store: bind the port, wait for the other node
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(4)
    s.settimeout(120)
    conn, _ = s.accept()
    peer = conn.recv(200)
    conn.sendall(me)
else:
    deadline = time.time() + 120
    while True:
        try:
            conn = socket.create_connection((os.environ["MASTER_ADDR"], port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    conn.sendall(me)
    peer = conn.recv(200)
print("rendezvous", "ok" if peer == me else "MIXED with " + peer.decode(), flush=True)
for i in range(1, 5):  # 6 s: longer than the tracking probe's timeout, so a dead server is said as it runs
    print(f"step={i}/4 loss=0.{9 - i}", flush=True)
    time.sleep(1.5)
sys.exit(0 if peer == me else 3)
"""


def ssh_cli(home: Path, client: Path, *args, timeout: int = 300, **kwargs):
    return subprocess.run([FSDP_TUI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(home, HOME=str(client)), cwd=ROOT, **kwargs)


class BlackHole:
    """A tracking "server" that accepts every connection and never answers a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def refused_port() -> int:
    """A loopback port nothing listens on: connections to it are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_launches_at_the_same_instant_on_the_same_hosts_with_dead_tracking(home, tmp_path, ns_hosts):
    """Three launches at once on the same two hosts, twice: each run gets a rendezvous port of its own
    (node 1 meets its own node 0), and none waits on its tracking server, dead three ways (it accepts and
    never answers, it refuses, a SQLite store that cannot be opened): each says so during the run, records
    its end when its job ends, and keeps what it could not send, sent later when the store works."""
    client, _hosts = ns_hosts
    hole = BlackHole()
    store = tmp_path / "not-yet" / "mlflow.db"
    stores = {"silent": f"http://127.0.0.1:{hole.port}", "refused": f"http://127.0.0.1:{refused_port()}",
              "unopenable": f"sqlite:///{store}"}
    code = tmp_path / "code"
    code.mkdir()
    (code / "rendezvous.py").write_text(RENDEZVOUS)
    files = {}
    for name, uri in stores.items():
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(f"""experiment_name: bad-day-{name}
compute: {{hosts: [node0, node1]}}
environment: {{python: {sys.executable}}}
code_source: {{type: snapshot, snapshot: {{root_path: {code}}}}}
command: exec python "$CODE_SOURCE_PATH/rendezvous.py"
mlflow: {{tracking_uri: "{uri}"}}
""")
    runs: dict[str, list[str]] = {name: [] for name in stores}
    try:
        for _round in range(2):
            procs = {name: subprocess.Popen([FSDP_TUI, "run", str(path), "--json"], stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, env=cli_env(home, HOME=str(client)),
                                            cwd=ROOT) for name, path in files.items()}
            ports = set()
            for name, proc in procs.items():
                out, err = proc.communicate(timeout=300)
                evs = events(out)
                run_id = evs[0]["run_id"]
                runs[name].append(run_id)
                assert proc.returncode == 0, (name, out[-3000:], err[-2000:])
                assert "Traceback" not in err
                node0 = (home / "runs" / run_id / "nodes" / "0.log").read_text()
                assert "rendezvous ok" in node0, node0[-2000:]
                ports.add(json.loads((home / "runs" / run_id / "plan.json").read_text())["master_port"])
                said = [i for i, e in enumerate(evs) if e["type"] == "RunStateChanged"
                        and "tracking (MLflow) failed, the run goes on" in e.get("detail", "")]
                end = next(i for i, e in enumerate(evs) if e["type"] == "RunFinished")
                assert said and said[0] < end, (name, [e.get("detail") for e in evs if e["type"] == "RunStateChanged"])
                assert evs[end]["state"] == "succeeded"
            assert len(ports) == len(procs), f"two runs took one rendezvous port: {ports}"
        every = [r for ids in runs.values() for r in ids]
        wait_until(lambda: not any(owned(home, r) for r in every), 120, "the owners to leave")
        store_runs = RunStore(home)
        for run_id in every:  # the end recorded, what could not be sent kept
            assert store_runs.get_run(run_id).summary.state == RunState.SUCCEEDED
            assert why_pending(home / "runs" / run_id), run_id
        show = ssh_cli(home, client, "show", runs["silent"][0])
        assert "not all sent yet" in show.stdout and f"fsdp-tui mlflow sync {runs['silent'][0]}" in show.stdout
        # A dead server is said again by the sync command, at once; nothing waits on it.
        syncs = {name: subprocess.Popen([FSDP_TUI, "mlflow", "sync", runs[name][0]], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=cli_env(home, HOME=str(client)),
                                        cwd=ROOT) for name in ("silent", "refused")}
        said = {name: proc.communicate(timeout=60) + (proc.returncode,) for name, proc in syncs.items()}
        assert said["silent"][2] == 1 and "no answer from" in said["silent"][1], said
        assert said["refused"][2] == 1 and "refused" in said["refused"][1].lower(), said
    finally:
        hole.close()

    # The store works now: sent by the sync command, and by the sender the next look starts, at once.
    store.parent.mkdir()
    first, second = runs["unopenable"]
    os.utime(home / "runs" / second / "mlflow-pending", (time.time() - 60, time.time() - 60))
    assert ssh_cli(home, client, "runs").returncode == 0
    synced = ssh_cli(home, client, "mlflow", "sync", first, timeout=120)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    wait_until(lambda: why_pending(home / "runs" / second) is None and not owned(home, second), 120,
               "the sender started by the next look to send the run")
    from mlflow import MlflowClient

    mlflow = MlflowClient(tracking_uri=stores["unopenable"])
    sent = mlflow.search_runs([mlflow.get_experiment_by_name("bad-day-unopenable").experiment_id])
    assert sorted(r.info.run_name for r in sent) == sorted(runs["unopenable"])
    for run in sent:
        assert run.info.status == "FINISHED"
        assert [m.step for m in mlflow.get_metric_history(run.info.run_id, "loss")] == [1, 2, 3, 4]
        assert {"0.log", "1.log", "workload.yaml"} <= {a.path for a in mlflow.list_artifacts(run.info.run_id)}
    every = [r for ids in runs.values() for r in ids]
    assert all(tagged(r) == [] for r in every)


ALLREDUCE = """\
import os, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
for step in range(1, 100000):
    dist.all_reduce(t)
    print(f"step={step} loss=0.5", flush=True)
    time.sleep(0.2)
"""


def _kill_namespace(netns: str) -> None:
    """Every process in the host's network namespace (its sshd, the agent, the job): as a reboot ends them."""
    send(namespace_pids(netns))


def test_a_node_restarted_mid_run_is_named_lost_and_its_output_dir_stays_its_own(home, tmp_path, ns_hosts):
    """node1's processes are all killed and its sshd restarts, as in a reboot: it comes back without its
    job, so it is lost and named first, the survivor's broken connection its consequence. Then another
    workload that names the same output_dir on node0 is refused (warned by validate at the key), unless it
    says it shares the folder on purpose."""
    client, started = ns_hosts
    if started[1].netns is None:
        pytest.skip("needs network namespace hosts (a reboot is every process of one host)")
    code = tmp_path / "code"
    code.mkdir()
    (code / "allreduce.py").write_text(ALLREDUCE)
    first = tmp_path / "first.yaml"
    first.write_text(f"""experiment_name: bad-day-reboot
compute: {{accelerator_type: CPU, procs_per_node: 1, hosts: [node0, node1]}}
environment: {{python: {sys.executable}}}
code_source: {{type: snapshot, snapshot: {{root_path: {code}}}}}
env_variables: {{OMP_NUM_THREADS: 1}}
command: |
  exec python -m torch.distributed.run --nnodes="$NUM_NODES" --node_rank="$NODE_RANK" --nproc_per_node=1 \\
    --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" "$CODE_SOURCE_PATH/allreduce.py"
parameters: {{output_dir: ~/shared-out}}
mlflow: {{enabled: false}}
""")
    proc = subprocess.Popen([FSDP_TUI, "run", str(first), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(client)), cwd=ROOT)
    seen: dict[int, int] = {}
    evs = []
    for line in proc.stdout:
        evs.append(json.loads(line))
        e = evs[-1]
        if e["type"] == "NodeLines":
            seen[e["node_rank"]] = seen.get(e["node_rank"], 0) + sum(x.startswith("step=") for x in e["lines"])
        if min(seen.get(0, 0), seen.get(1, 0)) >= 3:
            break
    _kill_namespace(started[1].netns)
    # Its sshd comes back once node0's job has ended of the broken connection: the survivor's failure is
    # seen first, while the restarted node is still away (the order that blamed the survivor).
    node0_state = started[0].home / ".fsdp-tui" / "runs" / evs[0]["run_id"] / "node-0" / "state.json"
    wait_until(lambda: json.loads(node0_state.read_text()).get("state") == "exited", 120, "node0's job to fail")
    started[1].restart()
    evs += [json.loads(x) for x in proc.stdout]
    assert proc.wait(timeout=300) == 1, evs[-3:]
    run_id = evs[0]["run_id"]
    end = evs[-1]
    assert end["type"] == "RunFinished" and end["state"] == "failed", end
    triage = end["triage"]
    assert triage["node_rank"] == 1 and triage["signature"] == "lost", triage
    assert triage["summary"].startswith("node 1 (node1): lost: its job is gone"), triage
    record = RunStore(home).get_run(run_id)
    states = {n.node_rank: n.state.value for n in record.nodes}
    assert states[1] == "lost" and states[0] in ("exited", "stopped"), record.nodes  # the survivor, as it ended
    node1_states = [(e["state"], e.get("detail", "")) for e in evs
                    if e["type"] == "NodeStateChanged" and e["node_rank"] == 1]
    assert node1_states[-1][0] == "lost", node1_states
    assert ("running", "reconnected") not in node1_states[-1:], node1_states
    show = ssh_cli(home, client, "show", run_id).stdout
    assert "triage    node 1 (node1): lost" in show, show
    wait_until(lambda: tagged(run_id) == [], 60, "every process of the run to be gone")

    # Another workload, the same output_dir on node0: refused, unless it shares the folder on purpose.
    second = tmp_path / "second.yaml"
    second.write_text("experiment_name: bad-day-other\ncompute: {hosts: [node0]}\ncommand: echo mine\n"
                      "parameters:\n  output_dir: ~/shared-out/\nmlflow: {enabled: false}\n")
    warned = ssh_cli(home, client, "validate", second)
    assert warned.returncode == 0 and "second.yaml:5:15: warning: parameters.output_dir: ~/shared-out on node0 " \
        f"is used by another workload's run: {run_id}" in warned.stdout, warned.stdout
    before = sorted(p.name for p in (home / "runs").iterdir())
    refused = ssh_cli(home, client, "run", second, "--json")
    assert refused.returncode == 2 and "not launched: parameters.output_dir ~/shared-out on node0" in refused.stderr
    assert "Traceback" not in refused.stderr and sorted(p.name for p in (home / "runs").iterdir()) == before
    shared = ssh_cli(home, client, "run", second, "--json", "--set", "parameters.output_dir_shared=true")
    assert shared.returncode == 0, shared.stdout[-2000:] + shared.stderr[-2000:]


def _limited(megabytes: int):
    """For ``preexec_fn``: the child's address space capped (what it may map, all of it)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (megabytes << 20, megabytes << 20))

    return limit


ALIAS_BOMB = "{" + ", ".join(
    [f"l0: &l0 [{', '.join(['x'] * 9)}]"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]) + "}"
"""Nine levels of nine aliases: 387 million strings once written out."""


def test_a_set_alias_bomb_a_60_mb_log_and_a_private_data_dir(tmp_path):
    """With the usual umask 022, what the data dir holds is its user's alone. An alias bomb through
    ``--set`` is refused in a capped address space, before anything is recorded; ``logs --tail`` of a
    60 MB log reads its end in a capped address space too (both caps far below what reading it all takes)."""
    home = tmp_path / "data"  # created by fsdp-tui itself
    wl = tmp_path / "w.yaml"
    wl.write_text("experiment_name: bad-day-local\ncommand: |\n  for i in 1 2 3; do echo \"step=$i/3 loss=0.5\"; done\n")
    run = subprocess.run([FSDP_TUI, "run", str(wl), "--json"], capture_output=True, text=True, timeout=300,
                         env=cli_env(home), cwd=ROOT, umask=0o022)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    run_id = events(run.stdout)[0]["run_id"]
    wait_until(lambda: not owned(home, run_id), 120, "the owner to send the run to MLflow and leave")
    mirror = home / "runs" / run_id / "nodes" / "0.log"
    modes = {p: p.stat().st_mode & 0o777 for p in (home, home / "runs.db", mirror, home / "mlflow.db")}
    assert modes == {home: 0o700, home / "runs.db": 0o600, mirror: 0o600, home / "mlflow.db": 0o600}, modes

    before = sorted((home / "runs").iterdir())
    for args in (("validate", wl), ("run", wl, "--json")):
        bomb = subprocess.run([FSDP_TUI, *map(str, args), "--set", f"compute.hosts={ALIAS_BOMB}"], capture_output=True,
                              text=True, timeout=120, env=cli_env(home), cwd=ROOT, preexec_fn=_limited(400))
        assert bomb.returncode in (1, 2), bomb.stderr[-2000:]
        assert "--set compute.hosts=" in bomb.stdout + bomb.stderr and "alias bomb" in bomb.stdout + bomb.stderr
        assert "Traceback" not in bomb.stderr and "MemoryError" not in bomb.stderr
    assert sorted((home / "runs").iterdir()) == before, "a refused launch leaves no run folder"

    line = b"%08d step\n"  # short lines, as progress output is: what costs most when each is an object
    block = b"".join(line % i for i in range(100_000))
    count = 4_300_000
    with open(mirror, "ab") as f:
        for _ in range(count // 100_000 - 1):
            f.write(block)
        f.write(b"".join(line % i for i in range(count - 100_000, count)))
    assert mirror.stat().st_size > 60e6
    tail = subprocess.run([FSDP_TUI, "logs", run_id, "--tail", "50"], capture_output=True, timeout=120,
                          env=cli_env(home), cwd=ROOT, preexec_fn=_limited(250))
    assert tail.returncode == 0, tail.stderr[-2000:]
    assert tail.stdout.splitlines() == [(line % i).rstrip(b"\n") for i in range(count - 50, count)]
