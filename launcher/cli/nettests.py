"""``fsdp-tui nettests [--json] [ID]``: the kept interconnect tests, newest first, or one of them again."""

from __future__ import annotations

import argparse
import json
import sys
import time


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nettests", help="list the kept interconnect tests (fsdp-tui nettest), or show one")
    p.add_argument("test_id", nargs="?", metavar="ID", help="show this test (an id or a unique prefix)")
    p.add_argument("--json", action="store_true", help="one JSON array (or object, with ID)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.api import Client
    from launcher.api.nettests import NettestNotFound, to_json
    from launcher.words import fmt_bandwidth

    nettests = Client().nettests
    if args.test_id:
        try:
            r = nettests.find(args.test_id)
        except NettestNotFound as err:
            print(f"fsdp-tui nettests: {err}", file=sys.stderr)
            return 2
        if r.measured is None:
            print("\n".join(r.problems or ["no result"]))
            return 1
        from launcher.cli.nettest import render, show

        judged = nettests.judge(r.measured, r.nodes, health=r.health)
        if args.json:
            return show(judged, r.run_id, True)
        render(judged, r.run_id, r.wall_s)
        return 0
    records = nettests.list()
    if args.json:
        print(json.dumps([{"run_id": r.run_id, "started_at": r.started_at, "nodes": list(r.nodes),
                           "state": r.state, "workload": r.workload,
                           **({"result": to_json(r.measured, r.nodes)} if r.measured else {"problems": list(r.problems)})}
                          for r in records], indent=2))
        return 0
    if not records:
        print("no interconnect tests yet: fsdp-tui nettest WORKLOAD.yaml")
        return 0
    width = max(len(r.run_id) for r in records)
    print(f"{'TEST':<{width}} {'STARTED':<16} {'NODES':>5} {'ALL-GATHER BUSBW':>17}  VERDICT")
    for r in records:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at or 0))
        m = r.measured
        if m is None:
            print(f"{r.run_id:<{width}} {started:<16} {len(r.nodes):>5} {'-':>17}  no result ({r.state})")
            continue
        world = m.scope("world")
        ag = world.largest("all_gather") if world else None
        verdict = nettests.judge(m, r.nodes).verdict_lines()[0]
        print(f"{r.run_id:<{width}} {started:<16} {m.nnodes:>5} {fmt_bandwidth(ag.busbw) if ag else '-':>17}  {verdict}")
    return 0
