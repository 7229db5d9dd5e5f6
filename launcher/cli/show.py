"""``fsdp-tui show RUN [--json]``: one run in words a user can act on: state and why, attempts, each
node (host, state, exit code, detail), triage, its MLflow run and where its files are. ``--nodes``: every
node as one row of figures (the monitor's overview), the odd node marked."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, on_run
from launcher.words import plural

if TYPE_CHECKING:
    from launcher.api import Client
    from launcher.api.runs import Estimate, RealFigures, SafeStep


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="one run: state and why, nodes, triage, MLflow, where its files are")
    add_run_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--nodes", action="store_true",
                   help="every node as one row (state, lines/s, how long quiet, CPU/RSS, GPU), the odd node marked")
    p.add_argument("--samples", action="store_true",
                   help="what the model answered as it learned: each prompt with its answer per step")
    p.set_defaults(handler=run)


@on_run("show")
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    from dataclasses import replace

    client.runs.adopt()
    if args.nodes:
        return _nodes(client, run_id, args.json)
    if args.samples:
        return _samples(client, run_id, args.json)
    report = client.runs.report(run_id)
    report = replace(report, next=tuple(_resumable(list(report.next), report.last_safe_step, run_id)))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    _print(report)
    return 0


def _nodes(client: Client, run_id: str, as_json: bool) -> int:
    from launcher.api.runs import THRESHOLDS

    rows = client.runs.node_rows(run_id)
    if as_json:
        print(json.dumps({"run": run_id, "nodes": [r.to_dict() for r in rows], "thresholds": THRESHOLDS}, indent=2))
        return 0
    out = sys.stdout.write
    out(f"run {run_id}: {plural(len(rows), 'node')}\n")
    out(f"  {'node':>4}  {'host':<20} {'state':<12} {'exit':>4} {'lines':>9} {'lines/s':>8} {'quiet':>7} "
        f"{'CPU%':>6} {'RSS MiB':>8} {'GPU%':>5} {'GPU GiB':>8} {'step':>6} {'step s':>7}  odd\n")
    for r in rows:
        out(f"  {r.node:>4}  {r.host[:20]:<20} {r.state:<12} {_dash(r.exit_code):>4} {r.lines:>9,} "
            f"{r.lines_per_s:>8.1f} {_dash(r.last_output_age_s, '{:.0f} s'):>7} {_dash(r.cpu_pct, '{:.0f}'):>6} "
            f"{_dash(r.rss_mib, '{:.0f}'):>8} {_dash(r.gpu_util_pct, '{:.0f}'):>5} "
            f"{_dash(r.gpu_mem_used_gib, '{:.1f}'):>8} {_dash(r.step):>6} {_dash(r.step_s, '{:.3f}'):>7}  {', '.join(m.what for m in r.odd)}\n")
    odd = [r.odd_words() for r in rows if r.odd]
    for words in odd:
        out(f"  odd node  {words}\n")
    if not odd:
        out("  no node stands out from the others\n")
    return 0


def _samples(client: Client, run_id: str, as_json: bool) -> int:
    from dataclasses import asdict

    from launcher.present.samples import history_lines

    sets = client.runs.samples(run_id)
    if as_json:
        print(json.dumps({"run": run_id, "samples": [asdict(s) for s in sets]}, indent=2, ensure_ascii=False))
        return 0
    if not sets:
        print(f"run {run_id}: no samples (set parameters.logging.samples to see what the model answers as it learns)")
        return 0
    steps = ", ".join(str(s.step) for s in sets)
    print(f"run {run_id}: answers at step{'s' if len(sets) > 1 else ''} {steps}")
    for line in history_lines(sets):
        print(line)
    return 0


def _dash(value, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def _resumable(steps: list[str], safe: SafeStep | None, run_id: str) -> list[str]:
    """``resume`` is suggested only with a complete checkpoint to resume from; with none, that is said."""
    from launcher.api.runs import NONE_YET

    if safe is None or safe.found is not None or safe.why_not != NONE_YET:
        return steps
    kept = [s for s in steps if not s.startswith("fsdp-tui resume ")]
    if len(kept) < len(steps):
        kept.append(f"no resume: run {run_id} has no complete checkpoint (fsdp-tui ckpt {run_id} lists them)")
    return kept


def _gathers(entries) -> list[str]:
    """The run's gathers in a line or two: how many checkpoints were made whole, and any that were not."""
    from launcher.api.runs import Gather
    from launcher.words import plural

    gathers = [g for g in entries if isinstance(g, Gather)]  # the rest are notes (a route given up)
    done = [g for g in gathers if g.ok]
    lines = []
    if done:
        size = sum(g.bytes or 0 for g in done) / 2**20
        seconds = sum(g.seconds or 0.0 for g in done)
        lines.append(f"{plural(len(done), 'checkpoint')} gathered into {done[-1].to}: {size:.1f} MiB "
                     f"in {seconds:.1f} s, off the training path")
    lines += [f"{g.name} NOT whole: {g.error}" for g in gathers if not g.ok]
    return lines


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _loss(value: float | None) -> str:
    """Four decimals, as ``runs`` and the app show losses (``--json`` keeps the full float)."""
    return "-" if value is None else f"{value:.4f}"


def _router(r) -> str:
    """`` (router aux 0.0123)`` for a mixture-of-experts run that reports its router loss."""
    return f" (router aux {r.router_aux_loss:.4f})" if r.router_aux_loss is not None else ""


def _print(r) -> None:
    from launcher.api.runs import FORCED_NOTE, TRIAGE

    out = sys.stdout.write
    out(f"run {r.run_id}  ({r.experiment})\n")
    why = (f": {r.detail}" if r.detail and (r.state not in ("succeeded", "running")
                                                 or r.detail.startswith(("stalled", FORCED_NOTE, "idle GPUs",
                                                                         "trained nothing", "continued run"))) else "")
    out(f"  state     {r.state}{why}\n")
    out(f"  attempt   {r.attempt} of {r.max_attempts}\n")
    out(f"  started   {_when(r.started_at)}   ended {_when(r.ended_at)}   duration {r.duration}\n")
    if r.step is not None:
        out(f"  progress  step {r.step}{'/' + str(r.max_steps) if r.max_steps else ''}"
            f"  loss {_loss(r.last_loss)}{_router(r)}  best eval {_loss(r.best_eval_loss)}\n")
    if r.data:
        out(f"  data      {r.data.words()}\n")
        if r.data.mix:
            out(f"  mix       {r.data.mix}  (rows trained on so far, and what the weights ask)\n")
    if r.memory:
        out(f"  memory    {r.memory.words()}\n")
    if r.resumed_from:
        out(f"  resumed   {r.resumed_from.words()}\n")
    if r.resume_check:
        out(f"  resume    {r.resume_check.words()}\n")
    elif r.resume_ignored:
        out(f"  resume    {r.resume_ignored}\n")
    for swap in r.swaps:
        out(f"  swap {swap.number:<4} {swap.words()}\n")
        for skipped in swap.skipped:
            out(f"            spare skipped: {skipped}\n")
        if swap.checkpoint_note:
            out(f"            checkpoint: {swap.checkpoint_note}\n")
        if swap.steps_lost is not None and swap.settled:
            out(f"            steps lost: {swap.steps_lost} (trained again from the checkpoint)\n")
    if r.last_safe_step:
        out(f"  safe      {r.last_safe_step.text()}\n")
    if r.checkpoints_place:
        out(f"  ckpts     {r.checkpoints_place}\n")
    for line in _gathers(r.gathers):
        out(f"  gathered  {line}\n")
    if r.lead_time:
        out(f"  lead time {r.lead_time}\n")
    if r.estimate is not None and r.estimate.estimate is not None:
        out(f"  estimate  {_estimate_words(r.estimate.estimate, r.estimate.real)}\n")
    if r.usage:
        u = r.usage
        money = f"  ~{u.cost:.2f} {u.currency}" if u.cost is not None else ""
        tries = (" (" + " + ".join(f"{h:.2f}" for h in u.per_attempt) + " by attempt)"
                 if len(u.per_attempt) > 1 else "")
        out(f"  usage     {u.hours:.2f} {u.kind.upper()}-hours{tries}{money}\n")
    if r.end_waits:
        out(f"  end       {r.end_waits}\n")
    if r.owner:
        out(f"  owner     {r.owner}\n")
    out("  nodes\n")
    for n in r.nodes:
        code = f" (exit code {n.exit_code})" if n.exit_code is not None else ""
        detail = f": {n.detail}" if n.detail else ""
        out(f"    node {n.node_rank}  {n.host:<20} {n.state.value}{code}{detail}\n")
        out(f"           its directory there: {n.node_dir}\n")
    if r.nettest:
        t = r.nettest
        out(f"  network   newest test of these nodes: {t.run_id} ({_when(t.started_at)}): {t.summary}; {t.verdict}\n")
    for slow in r.ranks.slow:
        out(f"  slow      {slow.says}\n")
    if r.triage:
        out(f"  triage    {r.triage.summary}\n")
    for words in r.odd_nodes:
        out(f"  odd node  {words}  (fsdp-tui show {r.run_id} --nodes)\n")
    for d in r.notifications:
        tries = f" after {d.attempts} tries" if d.attempts > 1 else ""
        said = "sent" if d.ok else f"FAILED{tries}: {d.error}"
        out(f"  notified  {d.event}: {d.sink}: {said}{tries if d.ok else ''}\n")
    if r.mlflow:
        m = r.mlflow
        if m.run_id:
            out(f"  mlflow    run {m.run_id} in experiment {m.experiment}\n")
            out(f"            see it: {m.ui_command}\n")
        if m.unsent:
            out(f"  mlflow    {m.unsent}\n")
    out(f"  files     {r.directory}  (workload.yaml, nodes/<rank>.log, metrics, events.jsonl,"
        f" {TRIAGE}, supervisor.log)\n")
    if r.workload_path:
        out(f"  workload  {r.workload_path}\n")
    for line in r.next:
        out(f"  next      {line}\n")


def _estimate_words(est: Estimate, real: RealFigures | None) -> str:
    """The launch's estimate and, once the run ended, the real wall time against it (docs/estimate.md)."""
    from launcher.words import fmt_duration

    words = (f"{fmt_duration(est.wall_s)} ({fmt_duration(est.low_s)} to {fmt_duration(est.high_s)}) "
             f"from {est.source or '?'}")
    if real is None or real.real_wall_s is None:
        return words
    words += f"; real {fmt_duration(real.real_wall_s)}"
    # Only a run that is what was estimated (succeeded, every step from the first) is compared: a
    # record from before that rule kept its error for any run, and says so only with its ratio.
    if real.was_compared and real.error is not None:
        return words + f" ({real.error:+.0%})"
    return words + f" (not compared: {real.why or 'not the run estimated'})"
