"""Launch fan-out: the same tiny job on 1 sshd host and on 16 (one real sshd per loopback address,
127.0.0.2 ... 127.0.0.17), against a sequential OpenSSH loop (copy the agent, start the job, host after
host) as a shell script would do it. Times are medians over ``--repeat`` launches.

"Launched" means every node's first output line has reached the local mirror: connected, host key
verified, files uploaded, job started, its output read back.

    .venv/bin/python benchmarks/bench_fanout.py [--hosts 16] [--repeat 3]

Needs openssh-server and openssh-client (``apt-get install openssh-server``); run as a user that may
start sshd (root in CI containers).
"""

from __future__ import annotations

import argparse
import asyncio
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


def machine_busy() -> float:
    """CPU seconds this whole machine (every core, every process: sshd and agents too) has been busy."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def launcher_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def launch_once(hosts: list[str], node_root: Path, home: Path) -> tuple[float, float]:
    """Seconds until every node's first line is mirrored, and until the run finished."""
    from launcher.paths import new_run_id
    from launcher.runs.launch import create_run
    from launcher.runs.owner.supervisor import Supervisor
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    text = (f"experiment_name: fanout\ncompute: {{hosts: [{', '.join(hosts)}]}}\nmlflow: {{enabled: false}}\n"
            f"environment: {{python: {sys.executable}}}\ncommand: echo up on $NODE_RANK\n")
    result = validate_text(text, "fanout.yaml")
    assert result.workload is not None, [p.format() for p in result.problems]
    plan = build_plan(result.workload, run_id=new_run_id("fanout"), node_root=str(node_root))
    start = time.perf_counter()
    # The run's owner, in this process (as its own process it runs the same code), so its CPU is measured.
    create_run(plan, home)
    owner = asyncio.create_task(Supervisor(home, plan.run_id, plan, adopted=False).run())
    mirrors = [home / "runs" / plan.run_id / "nodes" / f"{rank}.log" for rank in range(len(hosts))]
    launched = None
    while not owner.done():
        if launched is None and all(m.exists() and m.stat().st_size for m in mirrors):
            launched = time.perf_counter() - start
        await asyncio.sleep(0.005)
    outcome = owner.result()
    assert outcome.state.value == "succeeded", outcome
    return launched or float("nan"), time.perf_counter() - start


def openssh_loop(hosts, client: Path, node_root: Path) -> float:
    """Upload the agent and start the job on each host in turn, as ``for h in ...; do scp; ssh; done``."""
    agent = ROOT / "launcher" / "backends" / "agent" / "jobs.py"
    opts = ["-F", str(client / ".ssh" / "config"), "-o", f"UserKnownHostsFile={client / '.ssh' / 'known_hosts'}",
            "-o", "BatchMode=yes"]
    start = time.perf_counter()
    for i, h in enumerate(hosts):
        d = node_root / f"loop-{i}"
        subprocess.run(["ssh", *opts, h.alias, f"mkdir -p {d}"], check=True)
        subprocess.run(["scp", "-q", "-S", shutil.which("ssh"), *opts, str(agent), f"{h.alias}:{d}/agent.py"], check=True)
        subprocess.run(["ssh", *opts, h.alias, f"cd {d} && nohup sh -c 'echo up on {i}' > log 2>&1 < /dev/null &"],
                       check=True)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hosts", type=int, default=16)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    from tests.support.sshd import start_hosts, stop_hosts

    with tempfile.TemporaryDirectory() as tmp:
        client, hosts = start_hosts(Path(tmp), args.hosts)
        os.environ["HOME"] = str(client)  # ~/.ssh/config aliases node0..nodeN, their keys in known_hosts
        home, node_root = Path(tmp) / "home", Path(tmp) / "nodes"
        try:
            asyncio.run(launch_once(["node0"], node_root, home))  # warm-up: imports, first connection
            results = {}
            for label, names in (("1 host", ["node0"]), (f"{args.hosts} hosts", [h.alias for h in hosts])):
                busy0, own0 = machine_busy(), launcher_cpu()
                runs = [asyncio.run(launch_once(names, node_root, home)) for _ in range(args.repeat)]
                own, busy = (launcher_cpu() - own0) / args.repeat, (machine_busy() - busy0) / args.repeat
                launched, finished = (statistics.median(r[i] for r in runs) for i in (0, 1))
                results[label] = launched
                print(f"fsdp-tui, {label:9}: launched in {launched:.2f} s, finished in {finished:.2f} s; CPU per "
                      f"launch: launcher {own:.2f} s, whole machine {busy:.2f} s of {os.cpu_count()} cores", flush=True)
            one, many = results["1 host"], results[f"{args.hosts} hosts"]
            print(f"ratio {args.hosts} hosts / 1 host: {many / one:.2f}x (floor: under 2x)", flush=True)
            loop_one = statistics.median(openssh_loop(hosts[:1], client, node_root) for _ in range(args.repeat))
            print(f"OpenSSH loop, 1 host:    {loop_one:.2f} s (copy + start only; output not read back)")
            loop = statistics.median(openssh_loop(hosts, client, node_root) for _ in range(args.repeat))
            print(f"OpenSSH loop, {args.hosts} hosts:  {loop:.2f} s; sequential OpenSSH loop / fsdp-tui at "
                  f"{args.hosts} hosts: {loop / many:.2f}x")
        finally:
            stop_hosts(hosts)

if __name__ == "__main__":
    main()
