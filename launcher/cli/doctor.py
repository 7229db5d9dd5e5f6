"""``fsdp-tui doctor FILE [--set k=v] [--json]``: preflight every node of a workload, in parallel."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from launcher.cli.planning import USAGE_ERROR, Verbs, plan_or_say
from launcher.cli.validate import add_set_option
from launcher.words import plural


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check every node of a workload before launching it",
                       description="Check every node of a workload in parallel: SSH with a verified host key, "
                       "Python, torch (and the built-in trainer's packages), GPUs against the workload, free "
                       "disk, and the rendezvous address and port. For a SLURM workload (compute.slurm): the login node, "
                       "sbatch --test-only, the partition from sinfo (nodes, GPUs, time limit), and a short probe "
                       "job on the compute nodes (Python, torch, a shared job_dir). Exit 0 when nothing is an error, 1 "
                       "otherwise, 2 when the workload itself is invalid.")
    p.add_argument("file", metavar="FILE", type=Path)
    add_set_option(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--estimate", action="store_true",
                   help="then time the workload's first steps on its nodes (a probe run, cancelled after "
                   "--probe-steps or --probe-budget) and estimate the whole run: wall time, GPU-hours, cost")
    p.add_argument("--probe-steps", type=int, default=20, metavar="N", help="steps the probe times (default 20)")
    p.add_argument("--probe-budget", type=float, default=600.0, metavar="SECONDS",
                   help="the most the probe may take, start-up included (default 600)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    plan = plan_or_say(args.file, args.overrides, Verbs("not checked", "cannot check"), run_id="doctor")
    if plan is None:
        return USAGE_ERROR
    import asyncio

    from launcher.api import Client

    report = asyncio.run(Client().doctor.diagnose(plan))
    probed = None
    if args.estimate and report.ok:
        probed = _probe(plan, args)
    if args.json:
        import json

        data = report.to_dict()
        if args.estimate:
            data["estimate"] = _probe_dict(probed)
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        render(report)
        if args.estimate:
            _say_estimate(probed, args.file)
    if not report.ok:
        return 1
    return 0 if not args.estimate or (probed is not None and probed.estimate is not None) else 1


def _probe(plan, args):
    """Time the workload's first steps on its nodes (``launcher.runs.probe``); progress on stderr."""
    import asyncio

    from launcher.api import Client

    said = [-1]

    def progress(steps: int, elapsed_s: float) -> None:
        if steps != said[0] and not args.json:
            said[0] = steps
            print(f"probe: {plural(steps, 'step')} after {elapsed_s:.0f} s", file=sys.stderr)

    if args.probe_steps < 2 or args.probe_budget <= 0:
        print(f"{args.file}: not probed: --probe-steps needs 2 or more, --probe-budget more than 0", file=sys.stderr)
        return None
    return asyncio.run(Client().doctor.probe(plan, steps=args.probe_steps, budget_s=args.probe_budget,
                                             on_progress=progress))


def _probe_dict(probed) -> dict | None:
    if probed is None:
        return None
    return {"probe_run": probed.run_id, "steps": probed.steps, "elapsed_s": probed.elapsed_s,
            "estimate": probed.estimate.to_dict() if probed.estimate else None, "why": probed.why}


def _say_estimate(probed, file) -> None:
    if probed is None:
        print(f"{file}: no estimate: the checks above must pass first")
        return
    print(f"probe run {probed.run_id}: {plural(probed.steps, 'step')} in {probed.elapsed_s:.0f} s, {probed.state}")
    if probed.estimate is None:
        print(f"{file}: no estimate: {probed.why}")
        return
    print("\n".join(probed.estimate.lines()))
    print(f"kept: `fsdp-tui run {file} --dry-run` and the editor estimate from it; each run compares its "
          "real wall time with its estimate at the end")


STYLES = {"ok": "green", "warning": "yellow", "error": "bold red"}


def render(report) -> None:
    """One block per node: check, status, detail, and under each problem what to do."""
    from rich.table import Table
    from rich.text import Text

    from launcher.cli import console as cli_console

    console = cli_console()
    for node in report.nodes:
        title = Text.assemble((node.label, "bold"), "  ", (node.status, STYLES[node.status]))
        table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 1, 0, 2))
        table.add_column("check", no_wrap=True, min_width=12)
        table.add_column("status", no_wrap=True, min_width=7)
        table.add_column("detail", overflow="fold")
        for check in node.checks:
            detail = Text(check.detail)
            if check.fix:
                detail.append(f"\n-> {check.fix}", style="dim")
            table.add_row(check.name, Text(check.status, STYLES[check.status]), detail)
        console.print(table)
        console.print()
    console.print(report.summary())
