"""A node dies mid-run: seconds from its death to the first training step after it, when the run's owner
swaps a spare in unattended, against a relaunch by hand (the run fails; ``fsdp-tui resume RUN`` onto the
same spare is typed the moment it has failed: the person's own reaction time, minutes to hours at 3 a.m.,
is not counted, so the hand's figure is its floor).

Five sshd hosts (network namespaces, each with a disk of its own), as ``tests/runs/owner/test_recovery_runs.py``:
node0..node2 run the built-in trainer (the tiny model, one CPU process each, a checkpoint every 5 steps),
node3 is a spare that fails the doctor (a stand-in ``nvidia-smi`` that fails), node4 the spare that takes
the place. Node 1's training processes are killed once step 8 is recorded and step 5 gathered. Both
ways run the same workload (the hand's without spares) on the same hosts, one after the other; the
owner's run prints its timeline (what ``docs/when-a-node-dies.md`` shows).

    flock /tmp/fsdp-bench.lock .venv/bin/python benchmarks/bench_recovery.py [--repeat 1]

Needs root (namespaces, bind mounts) and openssh-server. Prints the load average: on a shared machine
the numbers are noisy, and most of either figure is starting torch and the job on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cli import FSDP_TUI, cli_env, events, wait_until  # noqa: E402
from tests.support.sshd import start_hosts, stop_hosts  # noqa: E402

STEPS, EVERY, KILL_AT = 30, 5, 8
SMI_LOST = "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost."


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def workload(tmp: Path, name: str, spares: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(f"""experiment_name: {name}
compute: {{accelerator_type: CPU, procs_per_node: 1, num_accelerators: 3, hosts: [node0, node1, node2],
          spares: [{spares}]}}
environment: {{python: {sys.executable}}}
mlflow: {{enabled: false}}
env_variables: {{OMP_NUM_THREADS: 1, GLOO_SOCKET_IFNAME: eth0}}
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: outputs
  max_seq_len: 64
  per_device_batch_size: 4
  learning_rate: 0.003
  max_steps: {STEPS}
  model: {{from_scratch: true}}
  logging: {{eval_max_batches: 1}}
  checkpoint: {{every_steps: {EVERY}, export_hf: false}}
""")
    return path


class Follow:
    """``fsdp-tui ARGS --json`` from a thread; the run's record read as it grows."""

    def __init__(self, home: Path, client: Path, *args: str) -> None:
        self.proc = subprocess.Popen([FSDP_TUI, *args, "--json"], stdout=subprocess.PIPE, text=True,
                                     env=cli_env(home, HOME=str(client)), cwd=ROOT)
        self.seen: list[str] = []
        threading.Thread(target=lambda: self.seen.extend(self.proc.stdout), daemon=True).start()
        self.id = wait_until(lambda: events("".join(self.seen[:1])) and events(self.seen[0])[0]["run_id"], 120, "id")
        self.dir = home / "runs" / self.id

    def train(self) -> list[dict]:
        try:
            lines = (self.dir / "metrics.jsonl").read_text().split("\n")[:-1]
        except OSError:
            return []
        return [r for r in map(json.loads, lines) if r.get("kind", "train") == "train"]

    def gathered(self, step: int) -> bool:
        try:
            lines = (self.dir / "gathers.jsonl").read_text().splitlines()
        except OSError:
            return False
        return any(json.loads(x).get("ok") and json.loads(x).get("step") == step for x in lines)

    def events(self) -> list[dict]:
        return [json.loads(x) for x in (self.dir / "events.jsonl").read_text().splitlines()]


def kill_training(host) -> float:
    """SIGKILL node ``host``'s torchrun and workers; when."""
    at = time.time()
    for pid in subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"torch.distributed.run" in cmd or b"trainer" in cmd.split(b"\0"):
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue
    return at


def until_fault(run: Follow) -> None:
    wait_until(lambda: any(r["step"] >= KILL_AT for r in run.train()), 600, f"step {KILL_AT}")
    wait_until(lambda: run.gathered(KILL_AT // EVERY * EVERY), 600, "the checkpoint before it gathered")


def by_the_owner(home: Path, client: Path, tmp: Path, started) -> tuple[float, list[str]]:
    run = Follow(home, client, "run", str(workload(tmp, "owner", "node3, node4")))
    until_fault(run)
    died = kill_training(started[1])
    code = run.proc.wait(timeout=900)
    swap = json.loads((run.dir / "swaps.json").read_text())["swaps"][0]
    assert code == 0 and swap["recovered"], (code, swap)
    first = swap["resumed_at"]
    timed = [(0.0, f"node 1's training processes killed (step {swap['failed_step']})"),
             (first - died, f"first step after the swap (step {swap['resumed_step']}), resume {swap['verdict']}; "
                            f"steps lost {swap['steps_lost']}")]
    for e in run.events():
        if e["at"] < died - 0.5 or e["type"] not in ("RunStateChanged", "NodeSwapped"):
            continue
        what = f"{e['state']}: {e['detail']}" if e.get("detail") else e.get("state", "")
        if e["type"] == "NodeSwapped":
            what = f"swap recorded: {e['swap']['text']}"
        timed.append((e["at"] - died, what))
    lines = [f"{'t (s)':>7}  what (run {run.id})"]
    lines += [f"{t:7.1f}  {what}" for t, what in sorted(timed, key=lambda x: x[0])]
    return first - died, lines


def by_hand(home: Path, client: Path, tmp: Path, started) -> tuple[float, float]:
    run = Follow(home, client, "run", str(workload(tmp, "hand", "")))
    until_fault(run)
    died = kill_training(started[1])
    run.proc.wait(timeout=900)
    failed = time.time()  # the run said it failed (a person would read it now, at the earliest)
    again = Follow(home, client, "resume", run.id, "--set", "compute.hosts=[node0,node4,node2]")
    wait_until(lambda: again.train(), 900, "the resumed run's first step")
    first = again.train()[0]["time"]
    again.proc.wait(timeout=900)
    return first - died, failed - died


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    client, started = start_hosts(tmp, 5, netns=True, private_disks=True, host_bins=True)
    smi = started[3].bin / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{SMI_LOST}' >&2\nexit 15\n")
    smi.chmod(0o755)
    owner, hand, hand_fail, timeline = [], [], [], []
    try:
        for i in range(args.repeat):
            home = tmp / f"home{i}"
            home.mkdir()
            print(f"repeat {i + 1}: {load()}", flush=True)
            seconds, timeline = by_the_owner(home, client, tmp, started)
            owner.append(seconds)
            print(f"  the owner swaps node4 in: {seconds:.1f} s from the death to the first step after it; "
                  f"{load()}", flush=True)
            seconds, failed = by_hand(home, client, tmp, started)
            hand.append(seconds)
            hand_fail.append(failed)
            print(f"  by hand: the run failed {failed:.1f} s after the death; `fsdp-tui resume` at once: first "
                  f"step {seconds:.1f} s after the death; {load()}", flush=True)
    finally:
        for host in started:
            for pid in subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        stop_hosts(started)
    print("\ntimeline of the owner's last run (seconds after the death):")
    print("\n".join(timeline))
    o, h = statistics.median(owner), statistics.median(hand)
    print(f"\nmedian of {args.repeat}: the owner {o:.1f} s, by hand (no reaction time) {h:.1f} s "
          f"(the run failed after {statistics.median(hand_fail):.1f} s): the owner takes {o / h:.2f}x the "
          "hand's floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
