"""Following a run headless (``run --watch/--json``): its events as lines on stdout; the exit code is
the outcome. Ctrl-C detaches (the run goes on, owned by its supervisor) unless asked to cancel."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TYPE_CHECKING

from launcher.events import (
    MetricsRecorded,
    NodeLines,
    NodeStateChanged,
    RunFinished,
    RunState,
    RunStateChanged,
    event_to_dict,
)
from launcher.words import plural

if TYPE_CHECKING:
    from launcher.api import Client

EXIT_CODES = {RunState.SUCCEEDED: 0, RunState.FAILED: 1, RunState.CANCELLED: 130, RunState.TIMED_OUT: 124}
DETACHED = 130


def watch(client: Client, run_id: str, *, json_events: bool, cancel_on_interrupt: bool, num_nodes: int) -> int:
    if not json_events:
        how = "Ctrl-C cancels it" if cancel_on_interrupt else "Ctrl-C detaches; the run goes on"
        print(f"run {run_id}: {plural(num_nodes, 'node')}; {how}", file=sys.stderr)
    from launcher.api.runs import FollowGaveUp

    try:
        return asyncio.run(_follow(client, run_id, json_events, num_nodes))
    except FollowGaveUp as err:
        print(f"fsdp-tui: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    if not cancel_on_interrupt:
        print(f"\ndetached from run {run_id}: it goes on. Follow it: fsdp-tui logs {run_id} --follow; "
              f"stop it: fsdp-tui cancel {run_id}", file=sys.stderr)
        return DETACHED
    print(f"\ncancelling run {run_id} ...", file=sys.stderr)
    report = asyncio.run(client.runs.cancel(run_id))
    print(f"run {run_id}: {report.state.value}", file=sys.stderr)
    return EXIT_CODES.get(report.state, 1)


async def _follow(client: Client, run_id: str, json_events: bool, num_nodes: int) -> int:
    from launcher.cli import keep_colour

    outcome = RunState.FAILED
    said: list[RunState] = []
    """The run states said so far: the end is said once, whether a state change or the end brought it."""
    async for event in client.runs.follow(run_id, tail_bytes=None, keep_colour=keep_colour() and not json_events):
        if json_events:
            print(json.dumps(event_to_dict(event)), flush=True)
        else:
            _print(event, num_nodes, said)
        if isinstance(event, RunFinished):
            outcome = event.state
    return EXIT_CODES.get(outcome, 1)


def _print(event, num_nodes: int, said: list[RunState]) -> None:
    if isinstance(event, NodeLines):
        prefix = f"[node {event.node_rank}] " if num_nodes > 1 else ""
        sys.stdout.write("".join(f"{prefix}{line}\n" for line in event.lines))
        sys.stdout.flush()
    elif isinstance(event, MetricsRecorded):
        r = event.record
        if r.kind == "train" and r.loss is not None and (r.step % 10 == 0 or r.step == r.max_steps):
            total = f"/{r.max_steps}" if r.max_steps else ""
            print(f"-- progress: step {r.step}{total} loss {r.loss:.4f}", file=sys.stderr)
    elif isinstance(event, NodeStateChanged):
        code = f" (exit code {event.exit_code})" if event.exit_code is not None else ""
        detail = f": {event.detail}" if event.detail else ""
        print(f"-- node {event.node_rank} {event.host}: {event.state.value}{code}{detail}", file=sys.stderr)
    elif isinstance(event, RunStateChanged):
        detail = f": {event.detail}" if event.detail else ""
        print(f"-- run {event.run_id}: {event.state.value} (attempt {event.attempt}){detail}", file=sys.stderr)
        said.append(event.state)
    elif isinstance(event, RunFinished):
        if said[-1:] != [event.state]:
            print(f"-- run {event.run_id}: {event.state.value}", file=sys.stderr)
        if event.triage is not None and event.triage.summary:
            print(f"-- triage: {event.triage.summary}", file=sys.stderr)
