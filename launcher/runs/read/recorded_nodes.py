"""The node rows of a run from its record on this machine (``fsdp-tui show RUN --nodes``, the odd node in
``show``'s triage), for a live run and for a finished one.

The record keeps each event with when it was written (``events.jsonl``: node states, GPU and CPU
samples) and each node's log mirror, but no time per log line: a node's lines are counted in its mirror,
its last output is the mirror's modification time, and its lines/s is the average over its running time
(the monitor, which sees lines arrive, counts the last 30 s instead).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from launcher.events import MetricsRecorded, NodeLines, NodeStateChanged, event_from_dict
from launcher.runs.core.layout import EVENTS, LOG_METRICS, METRICS, mirror_path, read_plan, read_records
from launcher.runs.core.resume_badge import ResumeBasis
from launcher.runs.core.store import RunRecord
from launcher.runs.read.nodes import NodeRow, node_rows
from launcher.runs.read.view import RunView

_CHUNK = 4 << 20


def recorded_view(record: RunRecord) -> tuple[RunView, float]:
    """The run's :class:`RunView` rebuilt from its record, and the time its rows are taken at: now for a
    live run, its end for a finished one (how long a node had been quiet when the run ended)."""
    s = record.summary
    view = RunView(s.run_id)
    view.resume_basis = ResumeBasis.of_plan(read_plan(record.directory))
    for node in record.nodes:
        view.node(node.node_rank).host = node.host
    last_at = s.started_at or time.time()
    for at, event in _events(record.directory / EVENTS):
        if isinstance(event, (NodeLines, MetricsRecorded)):
            continue  # older records kept these in the events file too; the mirrors are what counts
        view.apply(event, now=at)
        last_at = at
    if not record.directory.joinpath(EVENTS).exists():
        for node in record.nodes:
            view.apply(NodeStateChanged(s.run_id, node.node_rank, node.host, node.state, node.exit_code), now=last_at)
    view.started_at = view.started_at or s.started_at  # the events' own times first: the store's are its writes'
    if s.state.is_final:
        view.state, view.ended_at = s.state, view.ended_at or s.ended_at or last_at
    now = view.ended_at if s.state.is_final and view.ended_at else time.time()
    records = read_records(record.directory / METRICS) or read_records(record.directory / LOG_METRICS)
    for r in records:
        view.apply(MetricsRecorded(s.run_id, r), now=last_at)
    for rank, node in view.nodes.items():
        path = mirror_path(record.directory, rank)
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            continue
        node.lines = _count_lines(path)
        if node.lines:
            node.last_output_at = min(mtime, now)
            begun = node.running_since or view.started_at or node.last_output_at
            node.rate.spread(begun, node.last_output_at, node.lines)
    return view, now


def recorded_rows(record: RunRecord) -> list[NodeRow]:
    view, now = recorded_view(record)
    return node_rows(view, now)


def _events(path: Path):
    """``(when, event)`` for each line of the events file that this version reads, a line at a time (a
    long run's file holds hundreds of megabytes of samples)."""
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                data = json.loads(line)
                event = event_from_dict(data)
            except (ValueError, KeyError, TypeError):
                continue
            if event is not None:
                yield float(data.get("at") or 0.0), event


def _count_lines(path: Path) -> int:
    count = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            count += chunk.count(b"\n")
    return count
