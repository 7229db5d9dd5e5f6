"""``fsdp-tui sweep FILE [--over K=V1,V2]... [--set K=V]... [--dry-run | --watch | --json]``,
``fsdp-tui sweep show SWEEP [--format table|csv|md|json] [--samples I,J [--step N]]``, ``fsdp-tui sweep cancel SWEEP`` and
``fsdp-tui sweep resume SWEEP``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.cli import number
from launcher.cli.validate import add_set_option
from launcher.words import plural

if TYPE_CHECKING:
    from launcher.api import Client
    from launcher.present.comparison import Format as ComparisonFormat

EXIT_CODES = {"succeeded": 0, "failed": 1, "cancelled": 130}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="launch variants of a workload and compare them "
                       "(or: sweep show/cancel/resume SWEEP)",
                       description="Launch every variant of a workload (its sweep: section, and --over axes) as "
                       "a run of its own, tagged with the sweep, `parallel` at a time; the sweep is driven by a "
                       "process of its own and outlives this command. Then: fsdp-tui sweep show SWEEP.")
    p.add_argument("target", metavar="FILE | show | cancel | resume")
    p.add_argument("sweep_id", nargs="?", metavar="SWEEP",
                   help="for show, cancel and resume: the sweep's id (or its tail)")
    p.add_argument("--over", action="append", default=[], metavar="KEY.PATH=V1,V2,...",
                   help="one axis of the grid (repeatable): every combination is a variant")
    add_set_option(p)
    p.add_argument("--parallel", type=number, metavar="N", help="variants at once (default: the file's sweep.parallel)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="list every variant's overrides and plan; touch nothing")
    mode.add_argument("--watch", action="store_true", help="follow the sweep (the default)")
    mode.add_argument("--json", action="store_true", help="stream sweep events as JSON lines")
    p.add_argument("--cancel-on-interrupt", action="store_true",
                   help="Ctrl-C cancels the sweep (default: Ctrl-C detaches and the sweep goes on)")
    p.add_argument("--format", choices=("table", "csv", "md", "json"), default="table", help="for show")
    p.add_argument("--samples", nargs="?", const="1,2", metavar="I,J",
                   help="for show: variants I and J's answers side by side (logging.samples; default: 1,2)")
    p.add_argument("--step", type=number, metavar="N",
                   help="for show --samples: the answers sampled at step N (default: each variant's newest)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from launcher.api import Client

    client = Client()
    if args.target in ("show", "cancel", "resume"):
        if not args.sweep_id:
            print(f"fsdp-tui sweep {args.target}: which sweep? (see fsdp-tui sweeps)", file=sys.stderr)
            return 2
        from launcher.api.sweeps import SweepNotFound

        try:
            sweep_id = client.sweeps.find(args.sweep_id)
        except SweepNotFound as err:
            print(f"fsdp-tui sweep {args.target}: {err}", file=sys.stderr)
            return 2
        if args.target == "resume":
            return resume(client, sweep_id, args)
        if args.target == "show":
            if client.sweeps.adopt([sweep_id]):
                print(f"fsdp-tui: sweep {sweep_id}: its driver had stopped; a new one goes on with it",
                      file=sys.stderr)
            if args.samples is not None:
                return show_samples(client, sweep_id, args.samples, args.step)
            return show(client, sweep_id, args.format)
        return cancel(client, sweep_id)
    return launch(client, Path(args.target), args)


def resume(client: Client, sweep_id: str, args: argparse.Namespace) -> int:
    """The variants of an ended sweep that did not succeed, run again; then followed like a new sweep."""
    try:
        record = client.sweeps.resume(sweep_id)
    except ValueError as err:
        print(f"fsdp-tui sweep resume: {err}", file=sys.stderr)
        return 1
    print(f"sweep {sweep_id}: {record.detail}", file=sys.stderr)
    try:
        return follow(client, sweep_id, json_events=args.json)
    except KeyboardInterrupt:
        print(f"\ndetached from sweep {sweep_id}: it goes on. See it: fsdp-tui sweep show {sweep_id}",
              file=sys.stderr)
        return 130


def show(client: Client, sweep_id: str, form: ComparisonFormat) -> int:
    from launcher.present.comparison import render

    record = client.sweeps.get(sweep_id)
    if form == "table":
        print(f"sweep {record.sweep_id}: {record.state} ({record.detail or plural(len(record.variants), 'variant')})")
    sys.stdout.write(render(client.sweeps.stats(record), form))
    return 0


def show_samples(client: Client, sweep_id: str, which: str, step: int | None) -> int:
    """Two variants' answers to the same prompts, side by side (at ``step``, else each one's newest)."""
    from launcher.present.samples import side_by_side_at, side_lines

    record = client.sweeps.get(sweep_id)
    try:
        picked = [int(x) for x in which.split(",")]
        if len(picked) != 2 or not all(1 <= i <= len(record.variants) for i in picked):
            raise ValueError
    except ValueError:
        print(f"fsdp-tui sweep show --samples: give two variant numbers from 1 to {len(record.variants)}, e.g. 1,2",
              file=sys.stderr)
        return 2
    variants = [record.variants[i - 1] for i in picked]
    sets = [client.runs.samples(v.run_id) if client.runs.get(v.run_id) is not None else [] for v in variants]
    newest = [s[-1].step if s else 0 for s in sets]
    steps = [step, step] if step is not None else newest
    left, right, pairs = side_by_side_at(sets[0], steps[0], sets[1], steps[1])
    labels = [f"{i}: {v.label} ({f'step {s.step}' if s else 'no samples'})"
              for i, v, s in zip(picked, variants, (left, right), strict=True)]
    print(f"sweep {record.sweep_id}: the answers of variants {picked[0]} and {picked[1]}"
          + (f" at step {step} (or the newest before it)" if step is not None else ", each at its newest step"))
    if not pairs:
        print("no samples in either variant (set parameters.logging.samples)")
        return 0
    for line in side_lines(pairs, labels[0], labels[1]):
        print(line)
    return 0


def cancel(client: Client, sweep_id: str) -> int:
    import asyncio

    record = asyncio.run(client.sweeps.cancel(sweep_id))
    for v in record.variants:
        print(f"variant {v.index} {v.label}: {v.state}  {v.run_id}")
    print(f"sweep {sweep_id}: {record.state}")
    return 0 if record.is_final else 1


def launch(client: Client, file: Path, args: argparse.Namespace) -> int:
    plan = client.sweeps.plan(file, args.over, args.overrides)
    for o in plan.base.result.overrides if plan.base is not None else ():
        print(f"--set {o.describe()}", file=sys.stderr)  # what every variant starts from
    for p in plan.problems:
        print(p.format(), file=sys.stderr)
    if not plan.ok:
        print(f"{file}: sweep not launched: fix the errors above", file=sys.stderr)
        return 2  # as run and doctor: the workload is invalid (1: a variant failed)
    if args.dry_run:
        from launcher.present.dry_run import dry_run_text

        parallel = args.parallel or plan.spec.parallel
        print(f"sweep of {file}: {plural(len(plan.variants), 'variant')}, {parallel} at a time, "
              f"on failure: {plan.spec.on_failure}")
        for v in plan.variants:
            print(f"\n=== variant {v.index}: {v.label}")
            for o in v.overrides:
                print(f"--set {o}")
            sys.stdout.write(dry_run_text(client.runs.dry_run(v.run_plan)))
        return 0
    blocked = [(v, b) for v in plan.variants for b in v.run_plan.blockers]
    for v, blocker in blocked:
        print(f"{file}: variant {v.index} ({v.label}) cannot run: {blocker}", file=sys.stderr)
    if blocked:
        return 2
    sweep_id = client.sweeps.start(plan, parallel=args.parallel)
    if args.json:
        print(json.dumps({"event": "sweep_started", "sweep_id": sweep_id, "variants": len(plan.variants)}), flush=True)
    else:
        print(sweep_id, flush=True)
        how = "Ctrl-C cancels it" if args.cancel_on_interrupt else "Ctrl-C detaches; the sweep goes on"
        print(f"sweep {sweep_id}: {plural(len(plan.variants), 'variant')}; {how}", file=sys.stderr)
    try:
        return follow(client, sweep_id, json_events=args.json)
    except KeyboardInterrupt:
        pass
    if not args.cancel_on_interrupt:
        print(f"\ndetached from sweep {sweep_id}: it goes on. See it: fsdp-tui sweep show {sweep_id}; "
              f"stop it: fsdp-tui sweep cancel {sweep_id}", file=sys.stderr)
        return 130
    print(f"\ncancelling sweep {sweep_id} ...", file=sys.stderr)
    return cancel(client, sweep_id) or 130


def follow(client: Client, sweep_id: str, *, json_events: bool, poll_s: float = 0.5) -> int:
    """Print each variant's changes of state until the sweep ends; the exit code is its outcome."""
    seen: dict[int, str] = {}
    sweep_state = ""
    rounds = 0
    while True:
        record = client.sweeps.get(sweep_id)
        for v in record.variants:
            if seen.get(v.index) != v.state:
                seen[v.index] = v.state
                if json_events:
                    print(json.dumps({"event": "variant", "sweep_id": sweep_id, "index": v.index, "label": v.label,
                                      "run_id": v.run_id, "state": v.state, "detail": v.detail}), flush=True)
                else:
                    why = f": {v.detail}" if v.detail and v.state != "succeeded" else ""
                    print(f"-- variant {v.index} ({v.label}) {v.state}  {v.run_id}{why}", file=sys.stderr)
        if record.state != sweep_state:
            sweep_state = record.state
            if json_events:
                print(json.dumps({"event": "sweep", "sweep_id": sweep_id, "state": record.state,
                                  "detail": record.detail}), flush=True)
        if record.is_final:
            break
        rounds += 1
        if rounds % 4 == 0:
            client.sweeps.adopt([sweep_id])  # a driver that died gets a successor
        if rounds % 20 == 0:
            client.runs.adopt()  # a variant whose owner died gets a new one
        time.sleep(poll_s)
    if not json_events:
        print(f"-- sweep {sweep_id} {record.state}: {record.detail}", file=sys.stderr)
        show(client, sweep_id, "table")
    return EXIT_CODES.get(record.state, 1)
