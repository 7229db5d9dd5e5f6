"""``fsdp-tui doctor FILE [--set k=v] [--json]``: preflight every node of a workload, in parallel."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from launcher.cli.planning import USAGE_ERROR, Verbs, plan_or_say
from launcher.cli.validate import add_set_option


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
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    plan = plan_or_say(args.file, args.overrides, Verbs("not checked", "cannot check"), run_id="doctor")
    if plan is None:
        return USAGE_ERROR
    import asyncio

    from launcher.doctor.diagnose import diagnose
    from launcher.paths import data_home

    report = asyncio.run(diagnose(plan, run_root=plan.node_root, home=data_home()))
    if args.json:
        import json

        json.dump(report.to_dict(), sys.stdout, indent=2)
        print()
    else:
        render(report)
    return 0 if report.ok else 1


STYLES = {"ok": "green", "warning": "yellow", "error": "bold red"}


def render(report) -> None:
    """One block per node: check, status, detail, and under each problem what to do."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
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
