"""SLURM: fsdp-tui against what a user does by hand, on the real 2-node test cluster
(tests/support/slurm_cluster.py: munged, slurmctld, two slurmd in network namespaces, a login node over SSH),
built by this script and stopped at the end.

1. A trivial 2-node job (``echo hello from $NODE_RANK``), ``--repeat`` times each way, alternating, after
   one warm-up of each way that is not counted:
   (a) ``fsdp-tui run FILE --json`` through the login node over SSH: first log line = the first NodeLines
       event on stdout, end-to-end = the process exits; both from the process start.
   (b) by hand, from this machine as a user's laptop: ``ssh login sbatch --parsable JOB.sbatch`` (2 nodes,
       1 task each, ``srun bash -c 'echo hello from $SLURM_NODEID'``, output to a file in job_dir), then
       ``ssh login tail -n +1 -F OUT`` until its first line (over SSH, as from a laptop); end-to-end = until
       ``ssh login 'while squeue -h --me -o %i | grep -qx ID; do sleep 0.5; done'`` returns (the poll runs on
       the login node every 0.5 s) and the tail has shown both lines; both from before the sbatch ssh.
2. Scheduler calls with ``--runs`` runs open: a blocker job holds both nodes (``--exclusive``), the runs'
   jobs (``sleep 600``) stay PENDING and are watched for ``--window`` s. ``squeue`` calls are counted from
   the QueueView cache file's "calls" and by a wrapper ``squeue`` first on the login node's PATH (the
   login's sshd sets PATH through SetEnv) that appends a line per call.

    .venv/bin/python benchmarks/bench_slurm.py [--repeat 5] [--runs 10] [--window 60]

Needs root and Debian's slurm packages (as the tests do: ``apt-get install --no-install-recommends
slurmctld slurmd slurm-client munge``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
WRAPPER = """#!/bin/sh
echo "$(date +%s.%N) $*" >> {log}
exec /usr/bin/squeue "$@"
"""
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def workload(path: Path, cluster, command: str) -> Path:
    path.write_text(f"""experiment_name: slurm-bench
compute:
  accelerator_type: CPU
  procs_per_node: 1
  num_accelerators: 2
  slurm: {{login: {cluster.login_alias}, partition: {cluster.partition}, job_dir: {cluster.job_dir}}}
mlflow: {{enabled: false}}
environment: {{python: {sys.executable}}}
env_variables: {{OMP_NUM_THREADS: 1, GLOO_SOCKET_IFNAME: eth0}}
command: {command}
""")
    return path


def cli_env(home: Path, cluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FSDP_TUI_", "SLURM_"))}
    env.update(FSDP_TUI_HOME=str(home), HOME=str(cluster.client_home))
    return env


def fsdp_tui_once(cluster, wl: Path, home: Path) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, cluster), cwd=ROOT)
    first = None
    last = {}
    for line in proc.stdout:
        if line.startswith("{"):
            ev = json.loads(line)
            last = ev
            if first is None and ev.get("type") == "NodeLines":
                first = time.perf_counter() - start
    rc = proc.wait()
    total = time.perf_counter() - start
    if rc != 0 or last.get("state") != "succeeded":
        raise RuntimeError(f"fsdp-tui run failed ({rc}): {last}")
    return first if first is not None else float("nan"), total


def by_hand_once(cluster, i: int) -> tuple[float, float]:
    out = cluster.job_dir / f"hand-{i}.out"
    script = cluster.job_dir / f"hand-{i}.sbatch"
    script.write_text(f"""#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output={out}
#SBATCH --chdir={cluster.job_dir}
srun bash -c 'echo hello from $SLURM_NODEID'
""")
    env = cluster.ssh_env()
    start = time.perf_counter()
    job = subprocess.run(cluster.ssh_argv("sbatch", "--parsable", str(script)), env=env, capture_output=True,
                         text=True, check=True).stdout.strip().split(";")[0]
    tail = subprocess.Popen(cluster.ssh_argv("tail", "-n", "+1", "-F", str(out)), env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    waiter = subprocess.Popen(cluster.ssh_argv(f"n=0; while squeue -h --me -o %i | grep -qx {job}; "
                                               "do n=$((n+1)); sleep 0.5; done; echo $n"),
                              env=env, stdout=subprocess.PIPE, text=True)
    lines = [tail.stdout.readline()]
    first = time.perf_counter() - start
    lines.append(tail.stdout.readline())
    polls = int(waiter.communicate()[0].strip())
    total = time.perf_counter() - start
    tail.terminate()
    tail.wait()
    if sorted(x.strip() for x in lines) != ["hello from 0", "hello from 1"]:
        raise RuntimeError(f"by hand: unexpected output {lines}")
    return first, total, polls


def latency(cluster, tmp: Path, repeat: int) -> None:
    wl = workload(tmp / "hello.yaml", cluster, "echo hello from $NODE_RANK")
    home = tmp / "home-latency"
    home.mkdir()
    fsdp_tui_once(cluster, wl, home)  # warm-up: the login node's agent installed, first connection
    by_hand_once(cluster, 0)
    ours, hand = [], []
    for i in range(repeat):
        cluster.wait_idle(60)
        ours.append(fsdp_tui_once(cluster, wl, home))
        cluster.wait_idle(60)
        hand.append(by_hand_once(cluster, i + 1))
        print(f"  rep {i + 1}: fsdp-tui first line {ours[-1][0]:.2f} s, end {ours[-1][1]:.2f} s; "
              f"by hand first line {hand[-1][0]:.2f} s, end {hand[-1][1]:.2f} s "
              f"(squeue listed the job at {hand[-1][2]} of its 0.5 s polls)", flush=True)
    for k, what in ((0, "submit to first log line"), (1, "end to end")):
        a, b = [r[k] for r in ours], [r[k] for r in hand]
        print(f"{what:25}: fsdp-tui median {statistics.median(a):.2f} s, p95 {p95(a):.2f} s; by hand median "
              f"{statistics.median(b):.2f} s, p95 {p95(b):.2f} s; fsdp-tui / by hand (medians) "
              f"{statistics.median(a) / statistics.median(b):.2f}x", flush=True)


def scheduler_calls(cluster, tmp: Path, runs: int, window: float, calls_log: Path) -> None:
    cluster.wait_idle(60)
    blocker = cluster.run(["sbatch", "--parsable", "--nodes=2", "--exclusive", f"--chdir={cluster.job_dir}",
                           "--wrap=sleep 600"]).stdout.strip()
    wl = workload(tmp / "sleep.yaml", cluster, "sleep 600")
    home = tmp / "home-calls"
    home.mkdir()
    procs, run_ids = [], []
    try:
        for _ in range(runs):
            procs.append(subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True, env=cli_env(home, cluster), cwd=ROOT))
        for p in procs:
            run_ids.append(json.loads(p.stdout.readline())["run_id"])
        deadline = time.monotonic() + 180
        while True:
            pending = [j for j, s in cluster.jobs().items() if j != blocker and s == "PENDING"]
            if len(pending) >= runs:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(pending)} of {runs} jobs pending after 180 s: {cluster.jobs()}")
            time.sleep(0.5)
        cache = home / "slurm" / f"{cluster.login_alias}.json"
        time.sleep(5)  # every owner past its submission and into watching
        c0, w0, t0 = json.loads(cache.read_text())["calls"], len(calls_log.read_text().splitlines()), time.monotonic()
        time.sleep(window)
        c1, w1, t1 = json.loads(cache.read_text())["calls"], len(calls_log.read_text().splitlines()), time.monotonic()
        minutes = (t1 - t0) / 60
        still = sum(1 for j, s in cluster.jobs().items() if j != blocker and s == "PENDING")
        cache_rate, wrap_rate = (c1 - c0) / minutes, (w1 - w0) / minutes
        naive = runs * 60.0
        print(f"{runs} runs open ({still} jobs still PENDING at the end), watched {t1 - t0:.1f} s:", flush=True)
        print(f"  squeue calls, QueueView cache 'calls': {c1 - c0} ({cache_rate:.1f}/min)")
        print(f"  squeue calls, wrapper on the login's PATH: {w1 - w0} ({wrap_rate:.1f}/min)")
        print(f"  {runs} independent watchers polling every 1 s: {naive:.0f}/min; fsdp-tui / that: "
              f"{wrap_rate / naive:.3f} (1/{naive / max(wrap_rate, 1e-9):.0f})", flush=True)
    finally:
        for rid in run_ids:
            subprocess.run([FSDP_TUI, "cancel", rid], env=cli_env(home, cluster), cwd=ROOT, capture_output=True,
                           timeout=120)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        cluster.run(["scancel", blocker], check=False)
        left = [j for j, s in cluster.jobs().items() if s in ("PENDING", "RUNNING")]
        print(f"  after cancel: fsdp-tui exit codes {sorted({p.returncode for p in procs})}, jobs left "
              f"pending/running: {left}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--window", type=float, default=60)
    p.add_argument("--skip-latency", action="store_true")
    args = p.parse_args()
    import tests.support.slurm_cluster as sc

    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        tmp = Path(tmp)
        wrap_dir = tmp / "wrap-bin"
        wrap_dir.mkdir()
        calls_log = tmp / "squeue-calls.log"
        calls_log.touch()
        (wrap_dir / "squeue").write_text(WRAPPER.format(log=calls_log))
        (wrap_dir / "squeue").chmod(0o755)
        plain = sc.sshd_config

        def with_path(*a, env=None, **kw):  # every session on the login node finds the wrapper first
            return plain(*a, env={**(env or {}), "PATH": f"{wrap_dir}:{STD_PATH}"}, **kw)

        sc.sshd_config = with_path
        cluster = sc.start_cluster(tmp)
        try:
            check = subprocess.run(cluster.ssh_argv("command -v squeue"), env=cluster.ssh_env(),
                                   capture_output=True, text=True).stdout.strip()
            if check != str(wrap_dir / "squeue"):
                raise RuntimeError(f"the login node's squeue is {check!r}, not the wrapper")
            print(f"cluster up: nodes {cluster.node_names}, login over SSH; squeue on the login is the wrapper; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
            if not args.skip_latency:
                latency(cluster, tmp, args.repeat)
            scheduler_calls(cluster, tmp, args.runs, args.window, calls_log)
        finally:
            sc.stop_cluster(cluster)
            print(f"cluster stopped; load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
