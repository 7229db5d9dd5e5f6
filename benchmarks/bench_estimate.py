"""The cost before launch against the real run: for each workload, in a fresh data dir, a probe
(``fsdp-tui doctor FILE --estimate``), then the dry run's estimate (``run --dry-run``, from the probe), then
the run itself (``run --json``); the real wall time (creation to end, as ``show`` counts it) against the
estimate, and the run's own record of both (``estimate.json``). With ``--again`` a second run follows,
estimated from the first (its measured end, corrected by its ratio).

    .venv/bin/python benchmarks/bench_estimate.py [--again] [--only tiny_cpu]
    .venv/bin/python benchmarks/bench_estimate.py --consecutive 10 [--ref main]

``--consecutive N`` launches the demo N times in a row in one fresh data dir (no probe: the first run has
nothing to be estimated from) and prints each run's estimate against its real wall time, beside what the
estimator of ``--ref`` (a git revision, default ``main``) would have said of the same runs from the same
records (replayed: its newest-run rule and its ratios, learned as it learned them). Goal: every run after
the first within 15% on a quiet machine.

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
    path = home / "runs" / run_id / "estimate.json"
    kept = json.loads(path.read_text()) if path.exists() else {}  # nothing measured before the first run
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


def consecutive(count: int, ref: str) -> None:
    """The demo ``count`` times in one data dir: each estimate (and the ``ref`` rule's, replayed) against
    its real wall time."""
    file = WORKLOADS["tiny_cpu"][0]
    with tempfile.TemporaryDirectory(prefix="bench-estimate-") as tmp:
        home = Path(tmp)
        rows = []
        print(f"== the demo {count} times in a row ({file}), load before {load()}")
        print("run  estimated (from)                       real     error   ratio kept  correction | ref rule  error"
              "  | load after")
        from launcher.runs.core.store import RunStore

        for i in range(count):
            result = one_run(home, file, [])
            est, real = result.get("estimate") or {}, result.get("real") or {}
            rows.append(result)
            record = RunStore(home).get_run(result["run_id"])
            wall = record.summary.ended_at - record.transitions[0][0] if record and record.summary.ended_at else None
            ref_est = replay(home, ref, [r["run_id"] for r in rows])
            error = real.get("error")
            ref_error = (wall - ref_est) / ref_est if ref_est and wall else None
            print(f"{i + 1:3d}  {_s(est.get('wall_s'))} ({len(est.get('source_runs') or []) or '-'} runs)"
                  f"{'':20s} {_s(wall)}  {_pct(error)}  {_num(real.get('ratio'))}  "
                  f"{_num(est.get('correction'))} | {_s(ref_est)}  {_pct(ref_error)} | {load()}", flush=True)
            result["ref_error"] = ref_error
        for name, errors in (("this rule", [(r.get("real") or {}).get("error") for r in rows[1:]]),
                             (f"{ref}'s rule", [r.get("ref_error") for r in rows[1:]])):
            errors = [e for e in errors if e is not None]
            if errors:
                within = sum(abs(e) <= 0.15 for e in errors)
                print(f"{name}, after the first: {within} of {len(errors)} within 15%; median |error| "
                      f"{sorted(abs(e) for e in errors)[len(errors) // 2]:.1%}, worst {max(errors, key=abs):+.1%}")


def _s(value) -> str:
    return f"{value:6.1f} s" if isinstance(value, (int, float)) else "     - "


def _pct(value) -> str:
    return f"{value:+6.1%}" if isinstance(value, (int, float)) else "     - "


def _num(value) -> str:
    return f"{value:5.2f}" if isinstance(value, (int, float)) else "   - "


def replay(home: Path, ref: str, run_ids: list[str]) -> float | None:
    """What ``ref``'s estimator would have estimated for the last of ``run_ids`` from the runs before it:
    its rule (the newest measurement, the median of the ratios its own estimates would have taught)."""
    old = _ref_module(ref)
    from launcher.runs.core.layout import METRICS, read_records
    from launcher.runs.core.store import RunStore

    store = RunStore(home)
    estimates: list[float | None] = []
    ratios: list[float] = []
    for i, run_id in enumerate(run_ids):
        newest = store.get_run(run_ids[i - 1]) if i else None
        t = None
        if newest is not None:
            s = newest.summary
            t = old.timing_of(s.run_id, read_records(newest.directory / METRICS), newest.transitions[0][0], s.ended_at,
                              probe=False, finished=s.state.value == "succeeded")
        wall = None
        if t is not None:
            est = old.estimate(timing=t, steps=200, eval_every=25, end_tail_s=None, unit="CPU", workers=2,
                               ratios=list(reversed(ratios))[:old.RATIO_RUNS], price=None, currency="")
            wall = est.wall_s
            record = store.get_run(run_id)
            real = record.summary.ended_at - record.transitions[0][0]
            if record.summary.state.value == "succeeded":
                ratios.append(real / (est.wall_s / (est.correction or 1.0)))
        estimates.append(wall)
    return estimates[-1]


_REF: dict[str, object] = {}


def _ref_module(ref: str):
    """``launcher/runs/core/estimate.py`` as it is at ``ref``, imported under another name."""
    if ref not in _REF:
        import importlib.util

        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:launcher/runs/core/estimate.py"],
                              capture_output=True, text=True, check=True).stdout
        path = Path(tempfile.mkdtemp(prefix="ref-estimate-")) / "ref_estimate.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("ref_estimate", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["ref_estimate"] = module
        spec.loader.exec_module(module)
        _REF[ref] = module
    return _REF[ref]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--again", action="store_true", help="a second run, estimated from the first")
    parser.add_argument("--only", choices=sorted(WORKLOADS), action="append")
    parser.add_argument("--consecutive", type=int, metavar="N", help="the demo N times in a row, each estimated")
    parser.add_argument("--ref", default="main", help="the git revision whose estimator is replayed beside")
    args = parser.parse_args()
    print(f"cores {os.cpu_count()}, load {load()}")
    if args.consecutive:
        consecutive(args.consecutive, args.ref)
        return 0
    for name in args.only or list(WORKLOADS):
        bench(name, args.again)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
