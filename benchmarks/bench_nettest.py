"""The interconnect self-test against the link's own limit, on network-namespace SSH hosts with shaped links
(tests/support/sshd.py; tc tbf on both ends of each host's veth), built by this script and removed at the end.

1. Two hosts, every link at ``--rate`` Mbit: (a) a plain TCP stream from host 0 to host 1 (a 1 MiB-buffer
   socket send loop for ``--tcp-s`` seconds, the receiver counts bytes), MB/s, and two such streams at
   once, one each way (an all-gather's traffic), MB/s each way, and one connection carrying both ways at
   once (as gloo's connection between two ranks does), MB/s each way; (b) ``fsdp-tui nettest
   --quick --max-size 64 --json`` on the same two hosts: the whole world's all-gather bus bandwidth at 64 MiB
   (one rank per host, gloo). Printed: both and their ratio (issue floor 0.5x, goal 0.8x).
2. Three hosts at ``--rate`` Mbit: ``fsdp-tui nettest --quick --max-size 1`` from the process start to its
   verdict (issue floor: under 30 s), ``--repeat`` times, median and max.
3. With ``--hosts N`` instead: N hosts (links unshaped unless ``--hosts-rate``), ``fsdp-tui nettest --quick``
   as a user runs it (sizes 1 and 16 MiB within the time budget), start to verdict, ``--repeat`` times, and
   where the time went: the test run's own timeline (connect and ship, start the agents, the job, the end),
   the job's phases (importing torch, the rendezvous, each scope, each round of pairs) and what the budget
   cut.

    .venv/bin/python benchmarks/bench_nettest.py [--rate 200] [--tcp-s 8] [--repeat 3]
    .venv/bin/python benchmarks/bench_nettest.py --hosts 16 [--hosts-rate 0] [--repeat 3]

Needs root (network namespaces, tc) and openssh-server, as the tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
RECEIVER = """import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 5201)); s.listen(1)
print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    if t0 is None:
        t0 = time.perf_counter()
    n += len(b)
print(n / (time.perf_counter() - t0), flush=True)
"""
SENDER = """import socket, sys, time
c = socket.create_connection((sys.argv[1], 5201)); buf = b"x" * (1 << 20); end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    c.sendall(buf)
c.close()
"""

DUPLEX = """import socket, sys, threading, time
role, addr, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
if role == "listen":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, 5202)); s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept()
else:
    c = socket.create_connection((addr, 5202))
def send():
    buf = b"x" * (1 << 20); end = time.monotonic() + seconds
    while time.monotonic() < end:
        c.sendall(buf)
    c.shutdown(socket.SHUT_WR)
threading.Thread(target=send, daemon=True).start()
n = 0; t0 = t1 = None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    t1 = time.perf_counter(); t0 = t0 or t1; n += len(b)
print(n / (t1 - t0), flush=True)
"""


def tcp_duplex(hosts, seconds: float) -> float:
    """Bytes per second each way of ONE TCP connection carrying both directions at once, as gloo's one
    connection between two ranks carries an all-gather (the mean of the two directions)."""
    listen = subprocess.Popen(["ip", "netns", "exec", hosts[1].netns, sys.executable, "-c", DUPLEX, "listen",
                               hosts[1].addr, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert listen.stdout.readline().strip() == "ready"
    connect = subprocess.Popen(["ip", "netns", "exec", hosts[0].netns, sys.executable, "-c", DUPLEX, "connect",
                                hosts[1].addr, str(seconds)], stdout=subprocess.PIPE, text=True)
    return statistics.mean(float(p.communicate()[0].split()[-1]) for p in (listen, connect))


def shape(hosts, rate: int, latency_ms: int) -> None:
    for i, h in enumerate(hosts):
        tbf = ["root", "tbf", "rate", f"{rate}mbit", "burst", "32kb", "latency", f"{latency_ms}ms"]
        subprocess.run(["tc", "qdisc", "replace", "dev", h.switch.veth(i), *tbf], check=True)
        subprocess.run(["ip", "netns", "exec", h.netns, "tc", "qdisc", "replace", "dev", "eth0", *tbf], check=True)


def tcp_stream(hosts, seconds: float, both_ways: bool = False) -> float:
    """Bytes per second of one TCP stream from host 0 to host 1 (``both_ways``: and one from host 1 to
    host 0 at the same time, as an all-gather's traffic is; the mean of the two)."""
    ends = [(hosts[0], hosts[1]), (hosts[1], hosts[0])][: 2 if both_ways else 1]
    receivers = []
    for _src, dst in ends:
        recv = subprocess.Popen(["ip", "netns", "exec", dst.netns, sys.executable, "-c", RECEIVER, dst.addr],
                                stdout=subprocess.PIPE, text=True)
        assert recv.stdout.readline().strip() == "ready"
        receivers.append(recv)
    senders = [subprocess.Popen(["ip", "netns", "exec", src.netns, sys.executable, "-c", SENDER, dst.addr,
                                 str(seconds)]) for src, dst in ends]
    for s in senders:
        s.wait()
    return statistics.mean(float(r.stdout.readline()) for r in receivers)


def nettest(home: Path, client: Path, workload: Path, *flags: str) -> tuple[float, dict]:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(client),
           "FSDP_TUI_HOME": str(home)}
    t0 = time.perf_counter()
    out = subprocess.run([FSDP_TUI, "nettest", str(workload), "--json", *flags], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    wall = time.perf_counter() - t0
    if not out.stdout.strip():
        raise SystemExit(f"nettest gave no result: {out.stderr[-2000:]}")
    return wall, json.loads(out.stdout)


def _states_at(home: Path, run_id: str) -> dict[str, float]:
    """When the test run first entered each state (and when its first node exited), epoch seconds."""
    at: dict[str, float] = {}
    for line in (home / "runs" / run_id / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        key = event.get("state") if event.get("type") == "RunStateChanged" else None
        if key and key not in at:
            at[key] = event["at"]
        if event.get("type") == "NodeStateChanged" and event.get("state") == "exited":
            at.setdefault("first node exited", event["at"])
    return at


def timeline(home: Path, run_id: str) -> dict[str, float]:
    """Seconds between the test run's recorded states: what the operator's side spent where."""
    at = _states_at(home, run_id)
    names = [("pending", "preflight", "owner start"), ("preflight", "starting", "connect, ship, checks"),
             ("starting", "running", "agents start torchrun"), ("running", "first node exited", "the job"),
             ("first node exited", "succeeded", "the end")]
    return {label: round(at[b] - at[a], 2) for a, b, label in names if a in at and b in at}


def many_hosts(args) -> None:
    """``--hosts N``: the quick test's start-to-verdict time on N hosts, and where it went."""
    from tests.support.sshd import start_hosts, stop_hosts

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        client, hosts = start_hosts(tmp, args.hosts, netns=True)
        print(f"{args.hosts} namespace SSH hosts up in {time.perf_counter() - t0:.1f} s")
        try:
            if args.hosts_rate:
                shape(hosts, args.hosts_rate, args.latency_ms)
            home = tmp / "home"
            walls = []
            for _ in range(args.repeat):
                load = os.getloadavg()[0]
                t_start = time.time()
                wall, data = nettest(home, client, workload(tmp, args.hosts), "--quick")
                if "figures" not in data:
                    raise SystemExit(f"nettest gave no result: {data}")
                walls.append(wall)
                at = _states_at(home, data["run_id"])
                outside = {"CLI start and connect phase": round(at["pending"] - t_start, 2),
                           "of which connect": data.get("connect_s") and round(data["connect_s"], 2),
                           "after the run": round(t_start + wall - at["succeeded"], 2)}
                print(f"  {wall:.1f} s (load average {load:.1f} -> {os.getloadavg()[0]:.1f}); {outside}; "
                      f"the run: {timeline(home, data['run_id'])}; the job: {data['phases_s']}; "
                      f"{len(data['pairs'])} pairs, {data['verdict']['text'][0][:60]}")
                for cut in data.get("cuts", []):
                    print(f"    budget: {cut['text']}")
            if args.keep:  # every run's raw result, to re-judge later (runs' times per pair)
                args.keep.mkdir(parents=True, exist_ok=True)
                for record in (home / "nettests").glob("*.json"):
                    shutil.copy(record, args.keep)
            links = f"{args.hosts_rate} Mbit tbf" if args.hosts_rate else "unshaped veth"
            print(f"{args.hosts} hosts ({links}), --quick, start to verdict: median {statistics.median(walls):.1f} s, "
                  f"max {max(walls):.1f} s over {len(walls)} (goal: under 30 s)")
        finally:
            stop_hosts(hosts)


def workload(tmp: Path, n: int) -> Path:
    path = tmp / f"nettest{n}.yaml"
    hosts = ", ".join(f"node{i}" for i in range(n))
    path.write_text(f"""experiment_name: bench-nettest
compute: {{accelerator_type: CPU, procs_per_node: 1, hosts: [{hosts}]}}
environment: {{python: {sys.executable}}}
env_variables: {{OMP_NUM_THREADS: 1, GLOO_SOCKET_IFNAME: eth0}}
command: "true"
""")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=200, help="every link's tbf rate, Mbit/s")
    parser.add_argument("--latency-ms", type=int, default=100, help="tbf's queue limit, as latency (ms)")
    parser.add_argument("--tcp-s", type=float, default=8.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=0, help="instead: time --quick on this many hosts")
    parser.add_argument("--hosts-rate", type=int, default=0, help="with --hosts: shape every link (Mbit; 0: no)")
    parser.add_argument("--keep", type=Path, help="with --hosts: copy each test's record (its raw times) here")
    args = parser.parse_args()
    if args.hosts:
        many_hosts(args)
        return
    from tests.support.sshd import start_hosts, stop_hosts

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        client, hosts = start_hosts(tmp, 3, netns=True)
        try:
            shape(hosts, args.rate, args.latency_ms)
            home = tmp / "home"
            tcp = tcp_stream(hosts, args.tcp_s)
            both = tcp_stream(hosts, args.tcp_s, both_ways=True)
            duplex = tcp_duplex(hosts, args.tcp_s)
            _wall, two = nettest(home, client, workload(tmp, 2), "--quick", "--max-size", "64")
            if "figures" not in two:
                raise SystemExit(f"nettest gave no result: {two}")
            ag = [f for f in two["figures"] if f["op"] == "all_gather"][-1]
            print(f"links at {args.rate} Mbit (tbf, both ends, latency {args.latency_ms} ms), gloo, one rank per host")
            print(f"TCP stream host0 -> host1 (1 MiB send loop, {args.tcp_s:g} s): {tcp / 1e6:.1f} MB/s")
            print(f"TCP streams both ways at once (as an all-gather sends): {both / 1e6:.1f} MB/s each way")
            print(f"one TCP connection carrying both ways at once (as gloo's between two ranks): "
                  f"{duplex / 1e6:.1f} MB/s each way")
            print(f"nettest all-gather {ag['bytes'] >> 20} MiB, 2 hosts: busbw {ag['busbw'] / 1e6:.1f} MB/s "
                  f"(algbw {ag['algbw'] / 1e6:.1f} MB/s, spread {ag['spread']:.0%}); "
                  f"ratio busbw / TCP = {ag['busbw'] / tcp:.2f}x (floor 0.5x, goal 0.8x), "
                  f"against both ways {ag['busbw'] / both:.2f}x, against one connection both ways "
                  f"{ag['busbw'] / duplex:.2f}x")
            walls = []
            for _ in range(args.repeat):
                wall, three = nettest(home, client, workload(tmp, 3), "--quick", "--max-size", "1")
                assert three["verdict"]["findings"] == [], three["verdict"]
                walls.append(wall)
            print(f"3 hosts, --quick --max-size 1, start to verdict: median {statistics.median(walls):.1f} s, "
                  f"max {max(walls):.1f} s over {len(walls)} (floor 30 s); the job's own phases: {three['phases_s']}")
        finally:
            stop_hosts(hosts)


if __name__ == "__main__":
    main()
