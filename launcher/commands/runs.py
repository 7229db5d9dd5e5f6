"""``fsdp-tui runs [--json]``: every run, newest first."""

from __future__ import annotations

import argparse
import json
import time


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list runs (id, experiment, state, nodes, start, duration, loss)")
    p.add_argument("--json", action="store_true", help="one JSON array")
    p.set_defaults(handler=run)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from launcher.paths import data_home
    from launcher.store import RunStore

    runs = RunStore(data_home()).list_runs()
    if args.json:
        print(json.dumps([{**asdict(r), "state": r.state.value} for r in runs], indent=2))
        return 0
    if not runs:
        print("no runs yet: fsdp-tui run WORKLOAD.yaml")
        return 0
    print(f"{'RUN':<44} {'STATE':<10} {'NODES':>5} {'STARTED':<16} {'DURATION':>8} {'STEP':>9} {'LOSS':>8} {'EVAL':>8}")
    for r in runs:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at)) if r.started_at else "-"
        duration = f"{r.duration_s / 60:.1f}m" if r.duration_s is not None else "-"
        step = f"{r.step or 0}/{r.max_steps}" if r.max_steps else str(r.step or "-")
        print(f"{r.run_id:<44} {r.state.value:<10} {r.num_nodes:>5} {started:<16} {duration:>8} {step:>9} "
              f"{_fmt(r.last_loss, '.4f'):>8} {_fmt(r.best_eval_loss, '.4f'):>8}")
    return 0
