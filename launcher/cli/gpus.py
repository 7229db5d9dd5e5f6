"""``fsdp-tui gpus HOST... | FILE [--stop] [--json]``: the processes holding GPU memory on those nodes, per
host and GPU, and which belong to our runs; ``--stop`` stops those of runs that have ended."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from launcher.present.gpus import whose
from launcher.words import plural


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gpus", help="processes holding GPU memory on nodes (leftovers of ended runs)",
                       description="List every process that holds GPU memory on the nodes (nvidia-smi), per host "
                       "and GPU, and which run of ours it belongs to. TARGET: SSH hosts (as in compute.hosts, "
                       "localhost for this machine) or one workload FILE (its hosts).")
    p.add_argument("targets", metavar="TARGET", nargs="+")
    p.add_argument("--stop", action="store_true",
                   help="stop the processes of our runs that have ended (SIGTERM, then SIGKILL after 10 s)")
    p.add_argument("--json", action="store_true", help="one JSON array, one object per host")
    p.set_defaults(handler=run)


def _plan(targets: list[str], home: Path):
    from launcher.workload.load import node_root_for, plan_file
    from launcher.workload.model import Workload
    from launcher.workload.plan import build_plan

    if len(targets) == 1 and targets[0].endswith((".yaml", ".yml")):
        planned = plan_file(Path(targets[0]), [], home=home)
        for problem in planned.problems:
            if problem.is_error:
                print(problem.format(), file=sys.stderr)
        return planned.plan
    try:
        workload = Workload.model_validate({"experiment_name": "gpus", "command": "true",
                                            "compute": {"hosts": targets}})
    except ValueError as err:
        print(f"fsdp-tui gpus: {err}", file=sys.stderr)
        return None
    return build_plan(workload, run_id="gpu-query", node_root=node_root_for(workload, home))


def run(args: argparse.Namespace) -> int:
    import asyncio

    from launcher.api import Client

    client = Client()
    plan = _plan(args.targets, client.home)
    if plan is None:
        return 2
    held = asyncio.run(client.nodes.gpu_holders(plan, stop_ended=args.stop))
    nodes = held.nodes
    if args.json:
        print(json.dumps([{"host": n.host, "gpus": n.gpus, "error": n.error, "stopped": list(n.stopped),
                           "holders": [h.to_dict() for h in n.holders]} for n in nodes], indent=2))
        return 1 if any(n.error for n in nodes) else 0
    for n in nodes:
        if n.error:
            print(f"{n.host}: {n.error}")
            continue
        if n.stopped:
            print(f"{n.host}: stopped {', '.join(map(str, n.stopped))}")
        if not n.holders:
            print(f"{n.host}: {plural(n.gpus, 'GPU')}, no process holds GPU memory")
        for h in n.holders:
            mem = f"{h.used_mib:.0f} MiB" if h.used_mib is not None else "? MiB"
            gpu = h.gpu if h.gpu is not None else "?"
            print(f"{n.host}  gpu {gpu}  pid {h.pid:<8} {mem:>10}  {h.process}  {whose(h.run_id, held.states)}")
    return 1 if any(n.error for n in nodes) else 0
