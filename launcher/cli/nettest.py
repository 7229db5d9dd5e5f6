"""``fsdp-tui nettest FILE [--set k=v] [--json] [--quick] [--params N]``: measure the links a workload
will use, name the slow node, and say what FSDP can expect."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from launcher.cli.planning import USAGE_ERROR, Verbs, plan_or_say
from launcher.cli.validate import add_set_option
from launcher.words import plural

MIB = 1 << 20


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nettest", help="measure the workload's interconnect; name the slow node",
                       description="Run a short torchrun job on exactly the nodes, processes per node and "
                       "backend the workload would use (NCCL on GPUs, gloo on CPU) that times all-gather, "
                       "reduce-scatter and all-reduce per message size inside each node, across nodes and over "
                       "the whole world, then pairs of nodes, and names a node or link much slower than the "
                       "others. On GPU nodes also a bf16 GEMM per GPU and the health counters of nvidia-smi. "
                       "With --params, says what FSDP can expect at the measured bandwidth. "
                       "Exit 0: measured, nothing slow; 1: a slow node, link or GPU, a health problem, or no "
                       "result; 2: bad input.")
    p.add_argument("file", metavar="FILE", type=Path)
    add_set_option(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="seconds, not minutes: sizes 1 and 16 MiB, and a time "
                   "budget per phase that bounds the iterations and cuts or skips 16 MiB on slow links (said "
                   "in the report); a --max-size is measured as given")
    p.add_argument("--params", type=float, metavar="N", help="model parameters (e.g. 8e9) for the FSDP estimate "
                   "(default: from the model's config.json where the nodes can read it)")
    p.add_argument("--max-size", type=float, metavar="MIB", help="the largest message in MiB (default: one "
                   "decoder block's all-gather where the model's config.json is readable on the nodes, else 256; "
                   "16 with --quick)")
    p.add_argument("--peak-tflops", type=float, metavar="T", help="one device's peak (default: by accelerator_type)")
    p.add_argument("--mfu", type=float, default=0.4, help="the compute side's MFU for the estimate (default 0.4)")
    p.add_argument("--phase-deadline", type=float, default=120.0, metavar="S",
                   help="the most one phase may take before the test gives up (default 120 s)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.max_size is not None and args.max_size < 1:
        print("fsdp-tui nettest: --max-size is in MiB and at least 1", file=sys.stderr)
        return USAGE_ERROR
    plan = plan_or_say(args.file, args.overrides, Verbs("not tested", "cannot test"))
    if plan is None:
        return USAGE_ERROR
    from launcher.api import Client
    from launcher.api.nettests import Options

    nettests = Client().nettests
    options = Options(quick=args.quick, max_bytes=int(args.max_size * MIB) if args.max_size else None,
                      phase_deadline_s=args.phase_deadline)
    limits = nettests.deadlines(plan, options).to_dict()
    print(f"nettest on {plural(len(plan.nodes), 'node')} x {plural(plan.topology.procs_per_node, 'process')}; deadlines: "
          + ", ".join(f"{name} {s:g} s" for name, s in limits.items()), file=sys.stderr)
    outcome = nettests.run(plan, options,
                           on_state=lambda state, detail: print(f"  {state} {detail}".rstrip(), file=sys.stderr))
    for line in outcome.problems if outcome.measured is None else outcome.unreachable:
        print(f"fsdp-tui nettest: {line}", file=sys.stderr)
    if outcome.measured is None:
        if args.json:
            print(json.dumps({"run_id": outcome.run_id, "state": outcome.state, "problems": list(outcome.problems),
                              "unreachable": list(outcome.unreachable), "deadlines_s": limits}))
        return 1
    judged = nettests.judge(outcome.measured, outcome.nodes, health=outcome.health, plan=plan, params=args.params,
                            peak_tflops=args.peak_tflops, mfu=args.mfu)
    code = show(judged, outcome.run_id, args.json, outcome.wall_s,
                extra={"unreachable": list(outcome.unreachable), "problems": list(outcome.problems),
                       "deadlines_s": limits, "connect_s": outcome.connect_s})
    return 1 if outcome.unreachable else code


def show(judged, run_id: str, as_json: bool, wall_s: float | None = None, extra: dict | None = None) -> int:
    """The judged figures as one JSON object or as tables and words; 1 when something is slow or unhealthy."""
    if as_json:
        data = {"run_id": run_id, **judged.figures_json(), **(extra or {})}
        if wall_s is not None:
            data["wall_s"] = round(wall_s, 2)
        print(json.dumps({**data, **judged.extras_json()}, indent=2))
    else:
        render(judged, run_id, wall_s)
    return 1 if judged.failed else 0


def render(judged, run_id: str, wall_s: float | None) -> None:
    from rich.table import Table
    from rich.text import Text

    from launcher.api.nettests import rows
    from launcher.cli import console as cli_console
    from launcher.present.nettest import headline, pair_lines
    from launcher.words import fmt_bandwidth, fmt_message_size

    measured, nodes, verdict, expectation, burnin = (judged.measured, judged.nodes, judged.verdict,
                                                     judged.expectation, judged.burnin)
    console = cli_console()
    console.print(f"[bold]nettest {run_id}[/]: {headline(measured)}")
    table = Table(box=None, padding=(0, 1))
    table.add_column("scope", overflow="fold")  # the one column that wraps on a narrow terminal
    for col in ("collective", "size", "median", "spread", "algbw", "busbw"):
        table.add_column(col, justify="left" if col == "collective" else "right", no_wrap=True)
    for r in rows(measured, nodes):
        table.add_row(r.scope, r.op.replace("_", "-"), fmt_message_size(r.nbytes), f"{r.median_s * 1e3:.2f} ms",
                      f"{r.spread:.0%}", fmt_bandwidth(r.algbw), fmt_bandwidth(r.busbw))
    console.print(table)
    for line in judged.cut_lines():
        console.print(Text(f"budget: {line}", style="yellow"))
    if measured.pairs:
        console.print("[bold]pairs of nodes[/] (one rank each, in parallel rounds)")
        for line in pair_lines(measured, nodes):
            console.print(f"  {line}")
    style = "bold red" if verdict.findings else "green"
    for i, line in enumerate(judged.verdict_lines()):
        console.print(f"[{style}]{line}[/]" if i < len(verdict.findings) or not verdict.findings else line)
    if burnin:
        console.print("[bold]GPU burn-in[/]")
        for line in burnin:
            console.print(f"  {line}", markup=False)
    if expectation is not None:
        console.print("[bold]what FSDP can expect[/]")
        for line in expectation.lines:
            console.print(f"  {line}")
    if wall_s is not None:
        console.print(f"[dim]took {wall_s:.1f} s from launch to verdict; kept as {run_id} "
                      "(fsdp-tui nettests)[/]")
