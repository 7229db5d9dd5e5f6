"""``fsdp-tui sweeps [--json]``: sweeps, newest first (id, state, variants, started)."""

from __future__ import annotations

import argparse
import json
import sys
import time


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweeps", help="list sweeps (id, state, variants, started)")
    p.add_argument("--json", action="store_true", help="one JSON array")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.api import Client

    client = Client()
    for sweep_id in client.sweeps.adopt():
        print(f"fsdp-tui: sweep {sweep_id}: its driver had stopped; a new one goes on with it", file=sys.stderr)
    sweeps = client.sweeps.list()
    if args.json:
        print(json.dumps([s.to_dict() for s in sweeps], indent=2))
        return 0
    if not sweeps:
        print("no sweeps yet: fsdp-tui sweep WORKLOAD.yaml --over parameters.fsdp.sharding=full_shard,no_shard")
        return 0
    width = max(len(s.sweep_id) for s in sweeps)
    print(f"{'SWEEP':<{width}} {'STATE':<10} {'VARIANTS':>8} {'DONE':>4} {'STARTED':<16}  DETAIL")
    for s in sweeps:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started_at)) if s.started_at else "-"
        done = sum(v.state == "succeeded" for v in s.variants)
        detail = s.detail
        if not s.is_final and s.started_at and not client.sweeps.driver_alive(s.sweep_id):
            detail = f"its driver is gone: end it with fsdp-tui sweep cancel {s.sweep_id}"
        print(f"{s.sweep_id:<{width}} {s.state:<10} {len(s.variants):>8} {done:>4} {started:<16}  {detail[:100]}")
    return 0
