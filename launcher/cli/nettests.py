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
    from launcher.nettest.figures import BadResult, decode, judge_pairs, rate
    from launcher.nettest.launch import list_records
    from launcher.nettest.report import to_dict, verdict_lines
    from launcher.paths import data_home

    records = list_records(data_home())
    if args.test_id:
        found = [r for r in records if r["run_id"].startswith(args.test_id)]
        if len(found) != 1:
            print(f"fsdp-tui nettests: {'no' if not found else 'more than one'} test matches '{args.test_id}' "
                  "(fsdp-tui nettests lists them)", file=sys.stderr)
            return 2
        records = found
    summaries = []
    for r in records:
        nodes = tuple(str(n) for n in r.get("nodes") or [])
        try:
            measured = decode(r.get("result"))
        except BadResult:
            summaries.append((r, nodes, None))
            continue
        summaries.append((r, nodes, measured))
    if args.test_id:
        r, nodes, measured = summaries[0]
        if measured is None:
            print("\n".join(r.get("problems") or ["no result"]))
            return 1
        from launcher.cli.nettest import render, show

        health = {int(k): v for k, v in (r.get("health") or {}).items() if str(k).isdigit()}
        if args.json:
            return show(measured, nodes, r["run_id"], None, args, health=health)
        from launcher.nettest.burnin import burnin_lines

        verdict = judge_pairs(measured.pairs)
        render(measured, nodes, r["run_id"], verdict, None, r.get("wall_s"),
               burnin_lines(list(measured.gemm_tflops), measured.local_world_size, health, nodes, None))
        return 0
    if args.json:
        print(json.dumps([{"run_id": r["run_id"], "started_at": r.get("started_at"), "nodes": list(nodes),
                           "state": r.get("state"), "workload": r.get("workload"),
                           **({"result": to_dict(m, nodes)} if m else {"problems": r.get("problems") or []})}
                          for r, nodes, m in summaries], indent=2))
        return 0
    if not summaries:
        print("no interconnect tests yet: fsdp-tui nettest WORKLOAD.yaml")
        return 0
    width = max(len(r["run_id"]) for r, _n, _m in summaries)
    print(f"{'TEST':<{width}} {'STARTED':<16} {'NODES':>5} {'ALL-GATHER BUSBW':>17}  VERDICT")
    for r, nodes, m in summaries:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.get("started_at") or 0))
        if m is None:
            print(f"{r['run_id']:<{width}} {started:<16} {len(nodes):>5} {'-':>17}  no result ({r.get('state')})")
            continue
        world = m.scope("world")
        ag = world.largest("all_gather") if world else None
        verdict = verdict_lines(judge_pairs(m.pairs), nodes)[0]
        print(f"{r['run_id']:<{width}} {started:<16} {m.nnodes:>5} {rate(ag.busbw) if ag else '-':>17}  {verdict}")
    return 0
