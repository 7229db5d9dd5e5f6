"""``fsdp-tui runs [--state S] [--experiment E] [--limit N | --all] [--json]``: runs, newest first; the
newest :data:`SHOWN` unless asked otherwise, and how many there are."""

from __future__ import annotations

import argparse
import json
import sys
import time

from launcher.words import plural


def register(sub: argparse._SubParsersAction) -> None:
    from launcher.events import RunState

    p = sub.add_parser("runs", help="list runs (id, state, nodes, start, duration, step, loss, resume check, why; "
                                    "probes, nettests and resumes that trained nothing said so)")
    p.add_argument("--state", choices=[s.value for s in RunState], help="only runs in this state")
    p.add_argument("--experiment", metavar="NAME", help="only runs of this experiment")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--limit", type=_positive, metavar="N", help=f"the newest N (default {SHOWN})")
    shown.add_argument("--all", action="store_true", help="every run (a data dir may keep thousands)")
    p.add_argument("--json", action="store_true", help="one JSON array")
    p.set_defaults(handler=run)


SHOWN = 50
"""Runs listed when no ``--limit`` is given: a screenful. The listing reads each shown run's folder, so
its time follows what it shows, not the runs kept."""


def _positive(text: str) -> int:
    """A count of runs: :func:`launcher.cli.number`'s digits, 1 or more."""
    from launcher.cli import number

    try:
        value = number(text)
    except argparse.ArgumentTypeError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a count of runs (1 or more)")
    return value


def why_shown(state: str, detail: str) -> str:
    """The WHY column: why a run ended badly, is stalled, or waits in a scheduler's queue (its reason); the
    run it continued, and a run that trained nothing."""
    return detail if (state in ("failed", "timed_out", "cancelled", "pending")
                      or detail.startswith(("stalled", "trained nothing", "continued run"))) else ""


WHY_WIDTH = 100


def shorten(text: str, width: int = WHY_WIDTH) -> str:
    """One line of at most ``width`` characters that keeps both ends: a reason's end often names the
    thing (the missing file, the node), its start says what happened (``fsdp-tui show RUN`` has it all)."""
    if len(text) <= width:
        return text
    head = text[:width * 2 // 5].rsplit(" ", 1)[0]
    tail = text[len(text) - (width - len(head) - 3):]
    tail = tail.split(" ", 1)[1] if " " in tail[1:] and text[-len(tail) - 1] != " " else tail
    return f"{head} … {tail.lstrip()}"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _usage_cell(usage) -> str:
    """``1.25 GPU-h`` (with a price: ``~3.10 USD``)."""
    if usage is None:
        return "-"
    if usage.cost is not None:
        return f"~{usage.cost:.2f} {usage.currency}"[:11]
    return f"{usage.hours:.2f} {usage.kind.upper()}-h"


def _end_waits(note: str, kept) -> str:
    """The WHY of a run whose end its owner could not write (the data dir's disk was full): the cause's
    own words first, then when its job ended and who records its end (``show RUN`` has the note whole)."""
    cause, _, words = note.partition(": ")
    what = words.split(": ", 1)[0]
    ended = (f"its job ended {kept.state} at {time.strftime('%H:%M:%S', time.localtime(kept.ended_at))}"
             if kept is not None else "stopped")
    if cause.startswith("gave up"):
        return f"{what}: {ended}; its owner {cause}: the next look with room records its end"
    return f"{what}: {ended}; its end is written as soon as there is room"


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from launcher.api import Client
    from launcher.api.runs import FORCED_NOTE

    client = Client()
    client.runs.adopt()  # a run whose owner died gets a new one, which catches it up
    limit = None if args.all else args.limit or SHOWN
    listed = client.runs.listing(state=args.state, experiment=args.experiment, limit=limit)
    more = ""
    if limit is not None and len(listed) == limit:
        total = client.runs.count(state=args.state, experiment=args.experiment)
        if total > limit:
            more = f"the newest {limit:,} of {plural(total, 'run')} shown (--limit N for more, --all for every one)"
    if args.json:
        print(json.dumps([{**asdict(r.summary), "state": r.summary.state.value, "duration_s": r.summary.duration_s,
                           "usage": r.usage.to_dict() if r.usage else None,
                           "resume_check": asdict(r.resume_check) if r.resume_check else None,
                           "kind": r.kind.kind, "trained_nothing": r.kind.trained_nothing,
                           "continued": r.kind.continued, "resume_ignored": r.resume_ignored or None}
                          for r in listed],
                         indent=2))
        if more:
            print(more, file=sys.stderr)
        return 0
    if not listed:
        filtered = args.state or args.experiment
        print("no runs match" if filtered else "no runs yet: fsdp-tui run WORKLOAD.yaml "
              "(or fsdp-tui for the app, with sample workloads to start from)")
        return 0
    width = max(len(x.summary.run_id) for x in listed)
    print(f"{'RUN':<{width}} {'STATE':<10} {'NODES':>5} {'STARTED':<16} {'DURATION':>8} {'STEP':>9} {'LOSS':>8} "
          f"{'EVAL':>8} {'USAGE':>11} {'RESUME':<9}  WHY")
    for x in listed:
        r = x.summary
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at)) if r.started_at else "-"
        seconds = x.kept_end.ended_at - r.started_at if x.kept_end and r.started_at else r.duration_s
        duration = f"{seconds / 60:.1f}m" if seconds is not None else "-"
        step = f"{r.step or 0}/{r.max_steps}" if r.max_steps else str(r.step or "-")
        if x.kind.kind == "nettest":
            step = "-"  # it trains nothing: the workload's max_steps is not its own
        why = why_shown(r.state.value, r.detail)
        if not why and r.detail.startswith((FORCED_NOTE, "idle GPUs")):
            why = r.detail
        if x.owner_note.startswith(("waiting for room", "gave up waiting for room")):
            why = _end_waits(x.owner_note, x.kept_end)
        check = x.resume_check
        if not why and check is not None and check.differs:
            why = "resume differs: " + "; ".join(check.differs)
        if not why and x.resume_ignored:
            why = x.resume_ignored
        if x.kind.kind != "training":  # a probe, a nettest: said first, whatever else is said (a run that
            why = x.kind.words() + (f"; {why}" if why else "")  # trained nothing says so in its recorded end)
        print(f"{r.run_id:<{width}} {r.state.value:<10} {r.num_nodes:>5} {started:<16} {duration:>8} {step:>9} "
              f"{_fmt(r.last_loss, '.4f'):>8} {_fmt(r.best_eval_loss, '.4f'):>8} {_usage_cell(x.usage):>11} "
              f"{check.verdict[:9] if check else '-':<9}  {shorten(why)}")
    if more:
        print(more)
    return 0
