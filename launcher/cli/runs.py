"""``fsdp-tui runs [--state S] [--experiment E] [--limit N] [--json]``: runs, newest first."""

from __future__ import annotations

import argparse
import json
import time


def register(sub: argparse._SubParsersAction) -> None:
    from launcher.events import RunState

    p = sub.add_parser("runs", help="list runs (id, state, nodes, start, duration, step, loss, why)")
    p.add_argument("--state", choices=[s.value for s in RunState], help="only runs in this state")
    p.add_argument("--experiment", metavar="NAME", help="only runs of this experiment")
    p.add_argument("--limit", type=int, metavar="N", help="only the newest N")
    p.add_argument("--json", action="store_true", help="one JSON array")
    p.set_defaults(handler=run)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from launcher.paths import data_home
    from launcher.runs.core.store import RunStore
    from launcher.runs.launch import adopt_orphans_of

    home = data_home()
    adopt_orphans_of(home)  # a run whose owner died gets a new one, which catches it up
    runs = RunStore(home).list_runs(state=args.state, experiment=args.experiment, limit=args.limit)
    if args.json:
        print(json.dumps([{**asdict(r), "state": r.state.value, "duration_s": r.duration_s} for r in runs],
                         indent=2))
        return 0
    if not runs:
        filtered = args.state or args.experiment
        print("no runs match" if filtered else "no runs yet: fsdp-tui run WORKLOAD.yaml "
              "(or fsdp-tui for the app, with sample workloads to start from)")
        return 0
    width = max(len(r.run_id) for r in runs)
    print(f"{'RUN':<{width}} {'STATE':<10} {'NODES':>5} {'STARTED':<16} {'DURATION':>8} {'STEP':>9} {'LOSS':>8} "
          f"{'EVAL':>8}  WHY")
    for r in runs:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at)) if r.started_at else "-"
        duration = f"{r.duration_s / 60:.1f}m" if r.duration_s is not None else "-"
        step = f"{r.step or 0}/{r.max_steps}" if r.max_steps else str(r.step or "-")
        why = r.detail if (r.state.value in ("failed", "timed_out", "cancelled")
                           or r.detail.startswith("stalled")) and r.detail else ""
        print(f"{r.run_id:<{width}} {r.state.value:<10} {r.num_nodes:>5} {started:<16} {duration:>8} {step:>9} "
              f"{_fmt(r.last_loss, '.4f'):>8} {_fmt(r.best_eval_loss, '.4f'):>8}  {why[:100]}")
    return 0
