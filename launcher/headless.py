"""``fsdp-tui run --watch`` and ``--json``: the launch as lines on stdout; the exit code is the outcome."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from launcher.events import (
    MetricsRecorded,
    NodeLines,
    NodeStateChanged,
    RunFinished,
    RunState,
    RunStateChanged,
    event_to_dict,
)
from launcher.nodes import NodeError
from launcher.plan import RunPlan

EXIT_CODES = {RunState.SUCCEEDED: 0, RunState.FAILED: 1, RunState.CANCELLED: 130, RunState.TIMED_OUT: 124}


async def run_headless(plan: RunPlan, *, watch: bool, json_events: bool, home: Path) -> int:
    from launcher.session import launch

    try:
        handle = await launch(plan, home=home)
    except NodeError as err:
        print(f"fsdp-tui: {err}", file=sys.stderr)
        return 1
    if not json_events:
        print(f"run {plan.run_id}: {len(plan.nodes)} node(s); Ctrl-C cancels it", file=sys.stderr)
    outcome = RunState.FAILED
    try:
        async for event in handle.events():
            if json_events:
                print(json.dumps(event_to_dict(event)), flush=True)
            elif watch:
                _print(event, len(plan.nodes))
            if isinstance(event, RunFinished):
                outcome = event.state
    except asyncio.CancelledError:
        await handle.cancel()
        await handle.wait()
        return EXIT_CODES[RunState.CANCELLED]
    return EXIT_CODES.get(outcome, 1)


def _print(event, num_nodes: int) -> None:
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
        print(f"-- node {event.node_rank} {event.host}: {event.state.value}{code}", file=sys.stderr)
    elif isinstance(event, RunStateChanged):
        detail = f": {event.detail}" if event.detail else ""
        print(f"-- run {event.run_id}: {event.state.value} (attempt {event.attempt}){detail}", file=sys.stderr)
    elif isinstance(event, RunFinished):
        print(f"-- run {event.run_id} {event.state.value}", file=sys.stderr)
        if event.triage and event.triage.get("summary"):
            print(f"-- triage: {event.triage['summary']}", file=sys.stderr)
