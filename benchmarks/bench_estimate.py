"""The cost before launch against the real run: for each workload, in a fresh data dir, a probe
(``fsdp-tui doctor FILE --estimate``), then the dry run's estimate (``run --dry-run``, from the probe), then
the run itself (``run --json``); the real wall time (creation to end, as ``show`` counts it) against the
estimate, and the run's own record of both (``estimate.json``). With ``--again`` a second run follows,
estimated from the first (its measured end, corrected by its ratio).

    .venv/bin/python benchmarks/bench_estimate.py [--again] [--only tiny_cpu]

Every workload runs on this machine (CPU, gloo): the demo and variants of it, and the bring-your-own
script. The load average is printed before and after each workload: on a busy machine the probe and the
run see different loads, and the error says so, not the estimator. Goal: the demo within 30% on a quiet
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FSDP_TUI = str(Path(sys.executable).parent / "fsdp-tui")
WORKLOADS = {
    "tiny_cpu": ("sample_workloads/tiny_cpu.yaml", []),
    "tiny_cpu_short_batch4": ("sample_workloads/tiny_cpu.yaml",
                              ["--set", "parameters.max_steps=80", "--set", "parameters.per_device_batch_size=4"]),
    "tiny_cpu_epochs": ("sample_workloads/tiny_cpu.yaml",
                        ["--set", "parameters.max_steps=null", "--set", "parameters.num_epochs=3"]),
    "byo_script": ("sample_workloads/byo_script/workload.yaml", ["--set", "parameters.max_steps=120"]),
}


def load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_TUI_")}
    env["FSDP_TUI_HOME"] = str(home)
    return subprocess.run([FSDP_TUI, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)


def dry_run_wall(home: Path, file: str, sets: list[str]) -> tuple[float | None, str]:
    out = cli(home, "run", file, "--dry-run", *sets).stdout
    said = out.rstrip("\n").split("\n\n")[-1]  # the estimate's block, after the plan
    m = re.search(r"estimate: (?:(\d+)h(\d+)m|(\d+)m(\d+)s) wall", said)
    if not m:
        return None, said
    h, hm, m_, s = (int(g) if g else 0 for g in m.groups())
    return h * 3600 + hm * 60 + m_ * 60 + s, said


def one_run(home: Path, file: str, sets: list[str]) -> dict:
    done = cli(home, "run", file, "--json", *sets)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    run_id = events[0]["run_id"]
    kept = json.loads((home / "runs" / run_id / "estimate.json").read_text())
    return {"run_id": run_id, "exit": done.returncode, **kept}


def bench(name: str, again: bool) -> None:
    file, sets = WORKLOADS[name]
    with tempfile.TemporaryDirectory(prefix="bench-estimate-") as tmp:
        home = Path(tmp)
        print(f"== {name}: {file} {' '.join(sets)}  (load before {load()})")
        probe = cli(home, "doctor", file, "--estimate", "--json", *sets)
        data = json.loads(probe.stdout)["estimate"] or {}
        print(f"probe {data.get('probe_run')}: {data.get('steps')} step(s) in {data.get('elapsed_s', 0):.0f} s"
              + (f"; no estimate: {data.get('why')}" if not data.get("estimate") else ""))
        wall, said = dry_run_wall(home, file, sets)
        print(said)
        rounds = 2 if again else 1
        for i in range(rounds):
            result = one_run(home, file, sets)
            est, real = result.get("estimate"), result.get("real")
            if not est or not real:
                print(f"run {result['run_id']} (exit {result['exit']}): no estimate kept")
                continue
            print(f"run {i + 1} {result['run_id']}: estimated {est['wall_s']:.1f} s ({est['low_s']:.1f}-"
                  f"{est['high_s']:.1f}) from {est['source']}, real {real['real_wall_s']:.1f} s, error "
                  f"{real['error']:+.1%}, ratio {real['ratio']}  (load after {load()})")
            if i + 1 < rounds:
                _, said = dry_run_wall(home, file, sets)
                print(said)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--again", action="store_true", help="a second run, estimated from the first")
    parser.add_argument("--only", choices=sorted(WORKLOADS), action="append")
    args = parser.parse_args()
    print(f"cores {os.cpu_count()}, load {load()}")
    for name in args.only or list(WORKLOADS):
        bench(name, args.again)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
