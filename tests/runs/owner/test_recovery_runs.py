"""A node dies mid-run and the run goes on: real SSH hosts (a network namespace each, sshd, torchrun with
gloo, the built-in trainer) with spares. Three training runs, each checking several things at once:

- private disks, a node's processes killed: a spare that fails the doctor (its ``nvidia-smi`` fails: a stand-in
  program, the one mocked GPU part) is skipped and said, the next spare takes the node's place, the newest
  whole checkpoint is where node 0 resumes from, the resume is ``verified``, the steps trained again give
  the losses they gave the first time; the swap is in ``show``, the events (what the monitor draws), the
  notification, and the failed host's count towards quarantine (its MLflow tags: test_recovery_swaps.py);
  then a failure in the user's code swaps nothing;
- a shared disk, a node cut off from the network: lost, replaced, resumed ``verified``;
- a shared disk, node 0's GPU falls off the bus (a stand-in ``nvidia-smi`` that lists one GPU, then fails),
  no spare, ``recovery.shrink``: the run goes on on two nodes, resumed ``resharded``, its global batch kept.

The pure rules and the policy's many cases are in ``test_recovery_swaps.py`` and ``test_recovery.py``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli_env, events, wait_until, write_workload
from tests.support.processes import namespace_pids, send

pytestmark = pytest.mark.slow

STEPS, EVERY, KILL_AT = 24, 5, 8
"""Steps of each run, its checkpoint cadence, and the step at which the run is held for the fault (a few steps
after a checkpoint: ``Run.hold_at``)."""
SMI_LOST = "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU"


def _hosts(factory, private: bool):
    from tests.support.sshd import start_hosts

    try:
        return start_hosts(factory.mktemp("hosts"), 5, netns=True, private_disks=private, host_bins=True)
    except RuntimeError as err:
        pytest.skip(str(err))


def _stop(started) -> None:
    from tests.support.sshd import stop_hosts

    for host in started:
        _kill(host, lambda cmd: True)
    stop_hosts(started)


@pytest.fixture(scope="module")
def private_hosts(tmp_path_factory):
    """Five hosts (node0..node4) whose homes are disks of their own; node3's ``nvidia-smi`` fails."""
    client, started = _hosts(tmp_path_factory, private=True)
    _smi(started[3], f"echo '{SMI_LOST}' >&2; exit 15")
    yield client, started
    _stop(started)


@pytest.fixture(scope="module")
def shared_hosts(tmp_path_factory):
    """Five hosts (node0..node4) sharing one home, as an NFS home is."""
    client, started = _hosts(tmp_path_factory, private=False)
    yield client, started
    _stop(started)


def _smi(host, body: str) -> Path:
    """A stand-in ``nvidia-smi`` on ``host`` only (first on its sessions' PATH)."""
    path = host.bin / "nvidia-smi"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _kill(host, which, how: int = signal.SIGKILL) -> list[int]:
    """Send ``how`` (SIGKILL) to the processes of ``host`` (its network namespace) that ``which`` picks by
    their command line."""
    picked = []
    for pid in namespace_pids(host.netns):
        try:
            if which(Path(f"/proc/{pid}/cmdline").read_bytes()):
                picked.append(pid)
        except OSError:
            continue
    return send(picked, how)


def _training(cmd: bytes) -> bool:
    return b"torch.distributed.run" in cmd or b"trainer" in cmd.split(b"\0")


def _worker(cmd: bytes) -> bool:
    """A training rank, not the torchrun that watches it."""
    return _training(cmd) and b"torch.distributed.run" not in cmd


def _workload(tmp: Path, started, *, hosts: str, spares: str = "", extra: str = "",
              output_dir: str = "outputs") -> Path:
    from tests.support.ssh_runs import gloo_iface

    return write_workload(tmp, f"""experiment_name: recovery
compute: {{accelerator_type: CPU, procs_per_node: 1, num_accelerators: 3, hosts: [{hosts}], spares: [{spares}]}}
environment: {{python: {sys.executable}}}
ssh: {{lost_after_s: 6, keepalive_interval_s: 1, keepalive_count_max: 2}}
env_variables: {{OMP_NUM_THREADS: 1, GLOO_SOCKET_IFNAME: {gloo_iface(started)}}}
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: {output_dir}
  max_seq_len: 64
  per_device_batch_size: 4
  learning_rate: 0.003
  max_steps: {STEPS}
  model: {{from_scratch: true}}
  logging: {{eval_max_batches: 1}}
  checkpoint: {{every_steps: {EVERY}, export_hf: false}}
{extra}""")


class Run:
    """``fsdp-tui run WORKLOAD --json`` followed from a thread, and its record read as it grows."""

    def __init__(self, home: Path, client: Path, workload: Path) -> None:
        self.home, self.client = home, client
        self.proc = subprocess.Popen([FSDP_TUI, "run", str(workload), "--json"], stdout=subprocess.PIPE, text=True,
                                     env=cli_env(home, HOME=str(client)), cwd=ROOT)
        self.seen: list[str] = []
        self.reader = threading.Thread(target=lambda: self.seen.extend(self.proc.stdout), daemon=True)
        self.reader.start()
        self.id = wait_until(lambda: events("".join(self.seen[:1])) and events(self.seen[0])[0]["run_id"], 60,
                             "the run's id")
        self.dir = home / "runs" / self.id

    def records(self) -> list[dict]:
        try:
            lines = (self.dir / "metrics.jsonl").read_text().split("\n")[:-1]  # whole lines: it is being written
        except OSError:
            return []
        return [json.loads(x) for x in lines]

    def train(self) -> list[tuple[int, float]]:
        return [(r["step"], r["loss"]) for r in self.records() if r.get("kind", "train") == "train"]

    def hold_at(self, started, step: int, timeout: float = 300) -> None:
        """Hold the run between two checkpoints, the older one whole: once node 0's trainer has written step
        ``step`` (read from node 0's own disk as it is written), every node's training processes are stopped
        (SIGSTOP) where they are, until the newest save before ``step`` is gathered into node 0's folder. The
        owner hears of a step a second or more after it is trained, and a tiny model's 24 steps take about as
        long: without the hold, the fault could come after the run's last step."""
        own = (started[0].disk or started[0].home) / ".fsdp-tui/runs" / self.id / "node-0" / "metrics.jsonl"

        def written() -> int:
            try:
                lines = own.read_text().split("\n")[:-1]
            except OSError:
                return 0
            return max((r["step"] for r in map(json.loads, lines) if r.get("kind", "train") == "train"), default=0)

        wait_until(lambda: written() >= step, timeout, f"step {step} on node 0", every_s=0.01)
        stopped = [pid for host in started for pid in _kill(host, _worker, signal.SIGSTOP)]
        assert stopped, "no training process to hold"
        saved = step // EVERY * EVERY
        wait_until(lambda: any(g.get("ok") and g.get("step") == saved for g in self.gathers()), timeout,
                   f"step {saved} gathered")

    def go_on(self, hosts) -> None:
        """The held training processes of ``hosts`` go on (SIGCONT) where they were."""
        for host in hosts:
            _kill(host, _worker, signal.SIGCONT)

    def gathers(self) -> list[dict]:
        try:
            return [json.loads(x) for x in (self.dir / "gathers.jsonl").read_text().splitlines()]
        except OSError:
            return []

    def end(self, timeout: float = 600) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=30)
        return code

    def show(self) -> dict:
        out = subprocess.run([FSDP_TUI, "show", self.id, "--json"], capture_output=True, text=True, timeout=120,
                             env=cli_env(self.home, HOME=str(self.client)), cwd=ROOT)
        return json.loads(out.stdout)

    def show_text(self) -> str:
        return subprocess.run([FSDP_TUI, "show", self.id], capture_output=True, text=True, timeout=120,
                              env=cli_env(self.home, HOME=str(self.client)), cwd=ROOT).stdout

    def events(self) -> list[dict]:
        return [json.loads(x) for x in (self.dir / "events.jsonl").read_text().splitlines()]


def _one_recovered_swap(run: Run, code: int, *, verdict: str) -> tuple[dict, dict]:
    """What every recovered run shows: succeeded with all its steps, one swap, the resume proved; the swap,
    and ``show --json``'s answer (the run has ended: it is final)."""
    shown = run.show()
    assert (code, shown["state"]) == (0, "succeeded"), "".join(run.seen)[-4000:] + run.show_text()
    trained = run.train()
    assert {s for s, _ in trained} == set(range(1, STEPS + 1)), trained
    assert trained[-1][0] == STEPS
    (swap,) = shown["swaps"]
    assert (swap["verdict"], swap["recovered"]) == (verdict, True), swap
    assert shown["resume_check"]["verdict"] == verdict and shown["resume_check"]["from_step"] == swap["checkpoint_step"]
    assert swap["checkpoint_step"] >= EVERY and swap["steps_lost"] == swap["failed_step"] - swap["checkpoint_step"]
    assert 0 < swap["seconds"] < 600 and swap["resumed_step"] == swap["checkpoint_step"] + 1
    return swap, shown


def _losses_again(run: Run, swap: dict) -> None:
    """The steps trained again after the swap give the losses the first attempt's gave (a verified resume
    continues exactly: the same rows, the same weights; float rounding at most)."""
    first: dict[int, float] = {}
    again: dict[int, float] = {}
    for step, loss in run.train():
        (again if step in first else first)[step] = loss
    redone = range(swap["checkpoint_step"] + 1, swap["failed_step"] + 1)
    assert set(redone) <= set(again), (first, again)
    assert {s: again[s] for s in redone} == pytest.approx({s: first[s] for s in redone}, rel=1e-4)


def test_a_node_killed_on_private_disks_is_replaced_by_the_spare_that_passes_the_doctor(home, tmp_path,
                                                                                        private_hosts):
    client, started = private_hosts
    told = tmp_path / "told.jsonl"
    wl = _workload(tmp_path, started, hosts="node0, node1, node2", spares="node3, node4", extra=f"""
notify: {{on: [recovered, succeeded], command: "cat >> {told}"}}
mlflow: {{enabled: false}}
""")
    run = Run(home, client, wl)
    run.hold_at(started, KILL_AT)
    assert _kill(started[1], _training), "node 1's training processes"
    run.go_on(started)
    code = run.end()
    swap, shown = _one_recovered_swap(run, code, verdict="verified")
    assert (swap["kind"], swap["node_rank"], swap["failed_host"], swap["replacement"], swap["signature"]) == (
        "spare", 1, "node1", "node4", "killed")
    assert swap["skipped"] == [f"node3: doctor: gpus: nvidia-smi failed: {SMI_LOST}"]
    assert "in node 0's folder" in swap["checkpoint_note"]
    assert swap["hosts_after"] == ["node0", "node4", "node2"]
    _losses_again(run, swap)
    assert [n["host"] for n in shown["nodes"]] == ["node0", "node4", "node2"]
    assert shown["nodes"][1]["node_dir"].endswith("/node-1.1")
    # The spare worked in a directory of its own on its own disk; the failed node's stays as it was left.
    assert (started[4].disk / ".fsdp-tui/runs" / run.id / "node-1.1").is_dir()
    assert not (started[4].disk / ".fsdp-tui/runs" / run.id / "node-1").exists()
    text = run.show_text()
    assert f"swap 1    {swap['text']}" in text and "spare skipped: node3: doctor: gpus: nvidia-smi failed" in text
    assert "attempt   2 of 2" in text
    # The monitor's view of the record (what the app draws): the swap in its node list and header.
    from launcher.events import event_from_dict
    from launcher.runs.read.nodes import node_rows
    from launcher.runs.read.view import RunView

    view = RunView(run.id)
    for e in run.events():
        event = event_from_dict(e)
        if event is not None:
            view.apply(event, now=e["at"])
    assert view.swap_badge() == "1 swap VERIFIED"
    assert [r.swapped_in for r in node_rows(view, time.time())] == ["", f"replaced node1 (killed at step "
                                                                        f"{swap['failed_step']})", ""]
    # The record's copy of node 1's log: node1's lines, then node4's from its first byte.
    log1 = (run.dir / "nodes" / "1.log").read_text()
    assert log1.count("=== fsdp-tui: attempt 2") == 1 and "resume check: verified" not in log1.split("attempt 2")[0]
    # Told: the recovery, then the success that names it.
    said, text, at = [], told.read_text(), 0
    while at < len(text):  # one summary per send, written as it came (no newline between them)
        summary, at = json.JSONDecoder().raw_decode(text, at)
        said.append(summary)
    assert [s["event"] for s in said] == ["recovered", "succeeded"], said
    assert said[0]["recovery"] == [swap["text"]] and "replaced a failed node" in said[0]["title"]
    # Counted towards quarantine: the failed host and the spare that failed the doctor, once each.
    from launcher.runs.core.quarantine import hosts

    assert {h.host: (h.failures, h.quarantined) for h in hosts(home)} == {"node1": (1, False), "node3": (1, False)}

    # A failure in the user's code names no node: no spare is asked, nothing is swapped, the run fails.
    wl = write_workload(tmp_path, f"""experiment_name: recovery-code
compute: {{hosts: [node0, node1, node2], spares: [node4]}}
environment: {{python: {sys.executable}}}
command: "if [ $NODE_RANK = 1 ]; then {sys.executable} -c 'raise ValueError(\\"bad value in the code\\")'; else sleep 60; fi"
mlflow: {{enabled: false}}
""")
    bad = Run(home, client, wl)
    assert bad.end(timeout=300) == 1
    shown = bad.show()
    assert shown["state"] == "failed" and shown["swaps"] == [], shown
    assert (shown["triage"]["node_rank"], shown["triage"]["signature"]) == (1, "python_error"), shown["triage"]
    assert [n["host"] for n in shown["nodes"]] == ["node0", "node1", "node2"]
    assert not any("checking spare" in (e.get("detail") or "") for e in bad.events())
    assert {h.host: h.failures for h in hosts(home)} == {"node1": 1, "node3": 1}


def _cut(host) -> None:
    """``host`` off the network: its link to the switch down (nothing it sends arrives, nothing reaches it)."""
    index = host.switch.namespaces.index(host.netns)
    subprocess.run(["ip", "link", "set", host.switch.veth(index), "down"], check=True)


def _mend(host) -> None:
    index = host.switch.namespaces.index(host.netns)
    subprocess.run(["ip", "link", "set", host.switch.veth(index), "up"], check=True)


def test_a_node_cut_off_from_the_network_is_lost_and_replaced_on_a_shared_disk(home, tmp_path, shared_hosts):
    client, started = shared_hosts
    wl = _workload(tmp_path, started, hosts="node0, node1, node2", spares="node3", extra="mlflow: {enabled: false}\n")
    run = Run(home, client, wl)
    run.hold_at(started, KILL_AT)
    cut_at = time.time()
    _cut(started[2])
    run.go_on(started)
    try:
        code = run.end()
    finally:
        _mend(started[2])
        _kill(started[2], lambda cmd: b"fsdp-tui" in cmd or _training(cmd))  # what it ran on, cut off
    swap, _ = _one_recovered_swap(run, code, verdict="verified")
    assert (swap["signature"], swap["node_rank"], swap["failed_host"], swap["replacement"]) == (
        "lost", 2, "node2", "node3"), swap
    assert swap["failed_at"] >= cut_at - 1
    _losses_again(run, swap)
    lost = [e for e in run.events() if e["type"] == "NodeStateChanged" and e["state"] == "lost"]
    assert lost and lost[0]["node_rank"] == 2 and "lost" in lost[0]["detail"]


def test_node_0s_gpu_falls_off_the_bus_and_the_run_shrinks_onto_the_nodes_left_resharded(home, tmp_path,
                                                                                        shared_hosts):
    """No spare, ``recovery.shrink``: node 0 (whose stand-in ``nvidia-smi`` lists one GPU until the test makes
    it fail, as a GPU that fell off the bus) is dropped, node 1 becomes node 0 and brings the newest whole
    checkpoint from the failed node's folder on the shared disk; 3 ranks x 4 rows become 2 ranks x 3 rows
    x 2 micro-batches, so each step still trains on the same 12 rows."""
    client, started = shared_hosts
    lost = tmp_path / "gpu-lost"
    _smi(started[0], f"""if [ -e {lost} ]; then echo '{SMI_LOST}' >&2; exit 15; fi
case "$*" in *--query-gpu*) echo "0, NVIDIA H100 80GB HBM3, 1024, 81559, 97, 350.5, 700.00";;
*) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)";; esac""")
    # Its GPU samples come every 5 s and two short ones in a row are a lost GPU; node 0's ranks are stopped
    # below, so the run waits for that however few steps it has.
    wl = _workload(tmp_path, started, hosts="node0, node1, node4",
                   extra="recovery: {shrink: true}\nmlflow: {enabled: false}\n")
    run = Run(home, client, wl)
    run.hold_at(started, KILL_AT)  # node 0's ranks stay stopped (below), the others' go on
    gpus = [e for e in run.events() if e["type"] == "GpuTelemetry" and e["node_rank"] == 0]
    assert gpus and gpus[-1]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"  # the stand-in is heard
    lost.touch()
    # A rank whose GPU fell off the bus hangs in its next call on the GPU: node 0's ranks stay stopped where
    # they are (torchrun itself answers), so the run cannot end before the lost GPU is seen.
    run.go_on(started[1:])
    code = run.end()
    swap, shown = _one_recovered_swap(run, code, verdict="resharded")
    assert (swap["kind"], swap["signature"], swap["node_rank"], swap["failed_host"]) == ("shrink", "gpu_lost", 0,
                                                                                         "node0"), swap
    assert swap["hosts_after"] == ["node1", "node4"]
    assert "brought from" in swap["checkpoint_note"], swap["checkpoint_note"]
    assert swap["batch"] == "per_device_batch_size 4 -> 3, gradient_accumulation_steps 1 -> 2 (12 rows a step, as before)"
    check = shown["resume_check"]
    assert (check["world_before"], check["world_after"]) == (3, 2) and "next batch" in check["checked"], check
    plan = json.loads((run.dir / "plan.json").read_text())
    assert plan["workload"]["parameters"]["gradient_accumulation_steps"] == 2
    assert [n["host"] for n in shown["nodes"]] == ["node1", "node4"]
    # The same rows each step on fewer ranks: the loss goes on where it was, within the run's own noise.
    first, again = {}, {}
    for step, loss in run.train():
        (again if step in first else first)[step] = loss
    redone = range(swap["checkpoint_step"] + 1, swap["failed_step"] + 1)
    assert {s: again[s] for s in redone} == pytest.approx({s: first[s] for s in redone}, rel=1e-3)
