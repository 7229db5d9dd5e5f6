"""Many nodes from one operator: 16, 32, 64 SSH hosts (a network namespace and an sshd each, one bridge),
one job on all of them through the real CLI (``fsdp-tui run --json``, its detached owner) and cancelled by
``fsdp-tui cancel``.

Per host count it prints:

- launch to all running (every node's ``running`` event), beside a plain parallel ``ssh HOST true`` to the
  same hosts (connect, verify, log in, run nothing: the floor for anything over SSH);
- the operator side's cost: CPU seconds and RSS of the run's owner (the supervisor) and of the follower
  printing the events (``fsdp-tui run --json``, what the app's worker does for the monitor), per node
  launched, per node-second of following a quiet job, and per 1,000 lines streamed;
- cancel to nothing left (``fsdp-tui cancel`` until no process of the run is on any host);
- with ``--app``: the app itself on the run while the nodes stream (``benchmarks/bench_tui.py --run``: the
  monitor as a user opens it, keys pressed, key-to-screen p50/p95), its CPU per 1,000 lines and peak RSS.

The node side's work is not counted: every host shares this machine's cores.

    .venv/bin/python benchmarks/bench_scale.py --hosts 16 32 64 [--stream-s 10] [--rate 50] [--doctor]
    .venv/bin/python benchmarks/bench_scale.py --hosts 64 --stream-s 40 --app

Needs root, iproute2 and openssh-server (``apt-get install openssh-server iproute2``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.cli import owner_pid, tagged  # noqa: E402  (this checkout's test helpers)

FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
TICK = os.sysconf("SC_CLK_TCK")

PRINTER = """import os, sys, time
rate, stream_s, go = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
rank = os.environ["NODE_RANK"]
print(f"node {rank} waiting", flush=True)
while not os.path.exists(go):  # every node streams at once, once all of them run
    time.sleep(0.1)
sent, start = 0, time.time()
while time.time() - start < stream_s:
    due = int((time.time() - start) * rate)
    if due > sent:
        sys.stdout.write("".join(f"node {rank} line {i} " + "x" * 60 + "\\n" for i in range(sent, due)))
        sys.stdout.flush()
        sent = due
    time.sleep(0.05)
print(f"node {rank} quiet now", flush=True)
time.sleep(3600)
"""


def cost(pid: int) -> tuple[float, float, float]:
    """A process's CPU seconds so far, its RSS now and its peak RSS (MiB)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return cpu, int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def wait_owner(run_id: str, timeout: float = 30) -> int:
    """The run's supervisor, once it has started."""
    deadline = time.monotonic() + timeout
    while (pid := owner_pid(run_id)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no owner process found for {run_id}")
        time.sleep(0.05)
    return pid


def ssh_true(client: Path, aliases: list[str]) -> float:
    """Seconds for ``ssh HOST true`` to every host at once (OpenSSH, all started together)."""
    opts = ["-F", str(client / ".ssh" / "config"), "-o", f"UserKnownHostsFile={client / '.ssh' / 'known_hosts'}",
            "-o", "BatchMode=yes"]
    start = time.perf_counter()
    procs = [subprocess.Popen(["ssh", *opts, a, "true"], stdin=subprocess.DEVNULL) for a in aliases]
    codes = [p.wait() for p in procs]
    took = time.perf_counter() - start
    if any(codes):
        raise RuntimeError(f"ssh HOST true failed on {sum(1 for c in codes if c)} hosts")
    return took


class Follower:
    """``fsdp-tui run --json``: its events, read on a thread, with when each arrived."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.events: list[tuple[float, dict]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self.lock:
                    self.events.append((time.perf_counter() - self.start, json.loads(line)))

    def seen(self) -> list[tuple[float, dict]]:
        with self.lock:
            return list(self.events)

    def wait_for(self, check, timeout: float, what: str) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check(self.seen()):
                return time.perf_counter() - self.start
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"{what}: not within {timeout:.0f} s: "
                           f"{[e for _, e in self.seen() if e['type'] != 'NodeLines'][-5:]}")

    def lines(self) -> int:
        return sum(len(e["lines"]) for _, e in self.seen() if e["type"] == "NodeLines")


APP_WARMUP_S = 8.0
"""With ``--app``: seconds the app is given to start and open the run before the nodes stream; it presses
keys from when each node has printed more than a pane shows for the rest of the streaming time."""


def app_watch(home: Path, run_id: str, seconds: float, env: dict[str, str]) -> subprocess.Popen:
    """``bench_tui.py --run``: the app on this run, keys pressed for ``seconds``, one JSON line at the end."""
    return subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "bench_tui.py"), "--run", run_id, "--home",
                             str(home), "--seconds", str(seconds), "--json"], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)


def measure(count: int, rate: float, stream_s: float, quiet_s: float, doctor: bool = False,
            app: bool = False) -> dict:
    from tests.support.sshd import start_hosts, stop_hosts

    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp_name:
        tmp = Path(tmp_name)
        client, hosts = start_hosts(tmp, count, netns=True, shared_key=True)
        try:
            aliases = [h.alias for h in hosts]
            ssh_true(client, aliases[:1])  # warm-up
            plain = ssh_true(client, aliases)
            home = tmp / "home"
            env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_TUI_")}
            env.update(FSDP_TUI_HOME=str(home), HOME=str(client))
            (tmp / "printer.py").write_text(PRINTER)
            wl = tmp / "scale.yaml"
            wl.write_text(f"experiment_name: scale\ncompute: {{hosts: [{', '.join(aliases)}]}}\n"
                          f"mlflow: {{enabled: false}}\nenvironment: {{python: {sys.executable}}}\n"
                          f"command: {sys.executable} {tmp / 'printer.py'} {rate} {stream_s} {tmp / 'go'}\n")
            doctor_s = None
            if doctor:
                start = time.perf_counter()
                out = subprocess.run([FSDP_TUI, "doctor", str(wl), "--json"], capture_output=True, text=True,
                                     env=env, cwd=ROOT, timeout=900)
                doctor_s = time.perf_counter() - start
                nodes = json.loads(out.stdout)["nodes"] if out.stdout.startswith("{") else []
                if out.returncode != 0 or len(nodes) != count:
                    raise RuntimeError(f"doctor failed (exit {out.returncode}): {out.stdout[-800:]}{out.stderr[-800:]}")
            cli_at = time.time()
            run = Follower([FSDP_TUI, "run", str(wl), "--json"], env)
            run.wait_for(lambda evs: bool(evs), 60, "a run id")
            run_id = run.seen()[0][1]["run_id"]
            owner = wait_owner(run_id)

            def running(evs) -> bool:
                return len({e["node_rank"] for _, e in evs if e["type"] == "NodeStateChanged"
                            and e["state"] == "running"}) == count

            launched = run.wait_for(running, 300, "every node running")
            phases = launch_phases(home, run_id, cli_at, cli_at + launched)
            run.wait_for(lambda evs: sum(1 for _, e in evs if e["type"] == "NodeLines"
                                         for line in e["lines"] if line.endswith(" waiting")) == count,
                         120, "every node's first line")
            watcher = app_watch(home, run_id, stream_s - 5, env) if app else None
            if watcher is not None:
                time.sleep(APP_WARMUP_S)
            own_launch, fol_launch = cost(owner), cost(run.proc.pid)
            lines0 = run.lines()
            (tmp / "go").touch()
            go = time.perf_counter()

            def quiet(evs) -> bool:
                return sum(1 for _, e in evs if e["type"] == "NodeLines"
                           for line in e["lines"] if line.endswith("quiet now")) == count

            app_row = None
            if watcher is not None:
                out_app, _ = watcher.communicate(timeout=stream_s * 4 + 120)
                if watcher.returncode != 0 or not out_app.strip():
                    owner_log = home / "runs" / run_id / "supervisor.log"
                    said = owner_log.read_text()[-1500:] if owner_log.exists() else "(no owner log)"
                    raise RuntimeError(f"the app's measurement failed (exit {watcher.returncode}): {out_app[-800:]}"
                                       f"\nthe owner's log: {said}")
                app_row = json.loads(out_app.strip().splitlines()[-1])
            run.wait_for(quiet, stream_s * 4 + 120, "every node done printing")
            own_stream, fol_stream = cost(owner), cost(run.proc.pid)
            streamed, stream_wall = run.lines() - lines0, time.perf_counter() - go
            time.sleep(quiet_s)
            own_quiet, fol_quiet = cost(owner), cost(run.proc.pid)

            start = time.perf_counter()
            out = subprocess.run([FSDP_TUI, "cancel", run_id], capture_output=True, text=True, env=env, cwd=ROOT,
                                 timeout=300)
            if out.returncode != 0:
                raise RuntimeError(f"cancel failed: {out.stdout}{out.stderr}")
            while tagged(run_id):
                time.sleep(0.05)
            cancelled = time.perf_counter() - start
            run.proc.wait(timeout=120)
            owner_peak = own_quiet[2]
        finally:
            stop_hosts(hosts)

    def per(a, b, n):
        return (b[0] - a[0]) / n if n else float("nan")

    def above_quiet(a, b, q0, q1):
        """CPU while streaming less what following the same nodes costs when they print nothing."""
        quiet_rate = (q1[0] - q0[0]) / quiet_s
        return ((b[0] - a[0]) - quiet_rate * stream_wall) / (streamed / 1000) * 1000

    return {
        "hosts": count, "ssh_true_s": plain, "doctor_s": doctor_s, "launch_s": launched, "cancel_s": cancelled,
        "owner_cpu_launch_per_node_ms": own_launch[0] / count * 1000,
        "follower_cpu_launch_per_node_ms": fol_launch[0] / count * 1000,
        "owner_cpu_per_1000_lines_ms": per(own_launch, own_stream, streamed / 1000) * 1000,
        "follower_cpu_per_1000_lines_ms": per(fol_launch, fol_stream, streamed / 1000) * 1000,
        "owner_cpu_per_1000_lines_above_quiet_ms": above_quiet(own_launch, own_stream, own_stream, own_quiet),
        "follower_cpu_per_1000_lines_above_quiet_ms": above_quiet(fol_launch, fol_stream, fol_stream, fol_quiet),
        "stream_wall_s": stream_wall,
        "owner_cpu_quiet_per_node_s_ms": per(own_stream, own_quiet, count * quiet_s) * 1000,
        "follower_cpu_quiet_per_node_s_ms": per(fol_stream, fol_quiet, count * quiet_s) * 1000,
        "owner_rss_mib": own_quiet[1], "owner_peak_rss_mib": owner_peak, "follower_rss_mib": fol_quiet[1],
        "lines_streamed": streamed, "app": app_row, "launch_phases_s": phases,
    }


def launch_phases(home: Path, run_id: str, cli_at: float, running_at: float) -> dict[str, float]:
    """Where a launch's time goes, from the run's recorded transitions (the owner's clock, as it wrote them):
    the command until the run is recorded (reading the workload, a connect to every node, the cheap checks),
    the owner's start (a process of its own), connecting to every node and preparing it (its agent, the
    parameters and code), and starting the job until every node's ``running`` reached the follower."""
    from launcher.events import RunState
    from launcher.runs.core.store import RunStore

    record = RunStore(home).get_run(run_id)
    at = {}
    for when, state, _attempt, _detail in record.transitions:
        at.setdefault(state, when)
    marks = [("before the record (validate, reach, cheap checks)", cli_at), ("owner start", at[RunState.PENDING]),
             ("connect and prepare the nodes", at[RunState.PREFLIGHT]), ("start the job", at[RunState.STARTING]),
             ("end", running_at)]
    return {name: round(marks[i + 1][1] - when, 3) for i, (name, when) in enumerate(marks[:-1])}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", type=int, nargs="+", default=[16, 32, 64])
    p.add_argument("--rate", type=float, default=50.0, help="lines/s each node prints while streaming")
    p.add_argument("--stream-s", type=float, default=10.0, help="seconds each node prints")
    p.add_argument("--quiet-s", type=float, default=10.0, help="seconds of following a job that prints nothing")
    p.add_argument("--doctor", action="store_true", help="also time fsdp-tui doctor on the same hosts")
    p.add_argument("--app", action="store_true", help="also the app on the run while it streams, keys pressed "
                   f"(give --stream-s well above {APP_WARMUP_S:.0f} s)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = []
    for count in args.hosts:
        row = measure(count, args.rate, args.stream_s, args.quiet_s, args.doctor, args.app)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{count} hosts: ssh HOST true (parallel) {row['ssh_true_s']:.2f} s; launch to all running "
                  f"{row['launch_s']:.2f} s ({row['launch_s'] / row['ssh_true_s']:.2f}x); cancel to nothing left "
                  f"{row['cancel_s']:.2f} s", flush=True)
            print("  launch: " + ", ".join(f"{name} {s:.2f} s" for name, s in row["launch_phases_s"].items()),
                  flush=True)
            if row["doctor_s"] is not None:
                print(f"  fsdp-tui doctor on every host: {row['doctor_s']:.1f} s", flush=True)
            print(f"  owner: {row['owner_cpu_launch_per_node_ms']:.0f} ms CPU per node launched, "
                  f"{row['owner_cpu_per_1000_lines_ms']:.0f} ms per 1,000 lines "
                  f"({row['owner_cpu_per_1000_lines_above_quiet_ms']:.0f} above quiet; {row['lines_streamed']} "
                  f"streamed in {row['stream_wall_s']:.1f} s), "
                  f"{row['owner_cpu_quiet_per_node_s_ms']:.2f} ms per node-second quiet; RSS "
                  f"{row['owner_rss_mib']:.0f} MiB (peak {row['owner_peak_rss_mib']:.0f})", flush=True)
            print(f"  follower (fsdp-tui run --json): {row['follower_cpu_launch_per_node_ms']:.0f} ms CPU per node "
                  f"launched, {row['follower_cpu_per_1000_lines_ms']:.0f} ms per 1,000 lines "
                  f"({row['follower_cpu_per_1000_lines_above_quiet_ms']:.0f} above quiet), "
                  f"{row['follower_cpu_quiet_per_node_s_ms']:.2f} ms per node-second quiet; RSS "
                  f"{row['follower_rss_mib']:.0f} MiB", flush=True)
            if (a := row["app"]) is not None:
                print(f"  app (the monitor, keys pressed): key-to-screen p50 {a['p50_ms']:.1f} ms, p95 "
                      f"{a['p95_ms']:.1f} ms, max {a['max_ms']:.1f} ms ({a['presses']} presses); "
                      f"{a['cpu_s'] / a['wall_s']:.0%} of a core, {a['cpu_s'] / max(a['lines'], 1) * 1e6:.0f} ms CPU "  # frames of keys too
                      f"per 1,000 lines ({a['lines']:,} lines seen), peak RSS {a['peak_rss_mib']:.0f} MiB", flush=True)
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        slope = (b["owner_rss_mib"] - a["owner_rss_mib"]) / (b["hosts"] - a["hosts"])
        print(f"owner RSS per extra node ({a['hosts']} -> {b['hosts']} hosts): {slope:.2f} MiB")


if __name__ == "__main__":
    main()
