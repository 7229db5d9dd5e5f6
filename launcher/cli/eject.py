"""``fsdp-tui eject FILE --to kubeflow|jobset|skypilot|sbatch [-o OUT] [--set k=v]``: the same workload as
another engine runs it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from launcher.cli.planning import USAGE_ERROR, Verbs, plan_or_say
from launcher.cli.validate import add_set_option

TARGET_NAMES = ("kubeflow", "jobset", "skypilot", "sbatch")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eject", help="render a workload for another engine (Kubeflow, JobSet, SkyPilot, sbatch)",
                       description="Render a workload as another engine runs it: a Kubeflow Trainer v2 TrainJob, "
                       "a Kubernetes JobSet, a SkyPilot task YAML, or the batch script the SLURM backend submits. "
                       "Environment, secrets (as references, never values), the trainer or your command, nodes, "
                       "GPUs, retries and timeout carry over; what the engine cannot express is listed on stderr "
                       "(and as comments in a YAML rendering). Nothing is submitted.")
    p.add_argument("file", metavar="FILE", type=Path)
    p.add_argument("--to", dest="target", required=True, choices=TARGET_NAMES, help="the engine")
    p.add_argument("-o", "--output", type=Path, metavar="OUT", help="write it to OUT (default: stdout)")
    add_set_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    plan = plan_or_say(args.file, args.overrides, Verbs("not ejected", "cannot eject"), run_id=None,
                       blockers=False)
    if plan is None:
        return USAGE_ERROR
    from launcher.api.records import Records
    from launcher.workload.plan import build_plan

    # The experiment's name as the run id: the same workload ejects to the same text (diffable).
    plan = build_plan(plan.workload, run_id=plan.workload.experiment_name, source_file=plan.source_file,
                      node_root=plan.node_root)
    ejected = Records.eject(plan, args.target)
    if args.output is not None:
        try:
            args.output.write_text(ejected.text, encoding="utf-8")
        except OSError as err:
            print(f"fsdp-tui eject: {args.output}: cannot write: {err.strerror}", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(ejected.text)
    print(f"{args.file}: ejected to {args.target}" + (f" in {args.output}" if args.output else "")
          + "; not carried over:", file=sys.stderr)
    for item in ejected.lost:
        print(f"  - {item}", file=sys.stderr)
    return 0
