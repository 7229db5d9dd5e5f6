"""Following a run from its local record, as the app and the headless commands do: its events, each
node's log mirror and its metrics, replayed from the start (or a log's tail) and then as they grow.

Followers never write the run's records. A follower that finds a live run without an owner starts one
(it catches up from the nodes' own files), so a run whose supervisor died is adopted by whoever looks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

from launcher.events import (
    MetricsRecorded,
    NodeLines,
    NodeStateChanged,
    RunEvent,
    RunFinished,
    RunStateChanged,
    event_from_dict,
)
from launcher.paths import run_dir
from launcher.runs.core.layout import EVENTS, LOG_METRICS, METRICS, file_size, mirror_path, read_triage
from launcher.runs.core.ownership import LOG_FILE, owned, owner_note, spawn_owner
from launcher.runs.core.store import RunStore
from launcher.runs.core.streams import LineSplitter
from launcher.words import plural
from trainer.wire.protocol import MetricRecord

POLL_S = 0.1
OWNER_CHECK_S = 2.0
READ_CHUNK = 4 << 20
BATCH_LINES = 2000
REPLAY_TAIL_BYTES = 2 << 20
"""How much of each node's log a reopened run shows (the panes keep 20,000 lines anyway)."""
MAX_OWNER_STARTS = 3
"""Owners started in a row that each stopped at once: then the follower gives up and says why."""
OWNER_SETTLED_S = 30.0


class FollowGaveUp(Exception):
    """Nothing can record the run (its owners cannot start, or the one alive cannot write): ``str()``
    says why, with the owner's last words, and what to do."""


def _owner_trouble(home: Path, run_id: str, starts: int) -> str | None:
    """Why following ``run_id`` cannot go on, or ``None`` while an owner records it."""
    if owned(home, run_id):
        note = owner_note(home, run_id)
        if note.startswith("waiting for room"):
            return (f"run {run_id}: its owner stopped the job and cannot write the run's record: "
                    f"{note.removeprefix('waiting for room: ')}. Its end is written as soon as there is room "
                    f"(fsdp-tui runs shows it then)")
        return None
    if starts < MAX_OWNER_STARTS:
        return None
    last = owner_note(home, run_id).removeprefix("cannot start: ") or _last_line(run_dir(home, run_id) / LOG_FILE)
    return (f"run {run_id}: nothing can record it: its owner was started {plural(starts, 'time')} and stopped each time; "
            f"the last one said: {last or '(nothing)'}. Fix that, then `fsdp-tui runs` adopts the run again")


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, file_size(path) - 4096))
            lines = [x for x in f.read().decode("utf-8", "replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


class _Tail:
    """A growing file read from an offset, complete lines at a time."""

    def __init__(self, path: Path, offset: int = 0, keep_colour: bool = False) -> None:
        self.path, self.offset = path, offset
        self.split = LineSplitter(keep_colour)

    def read(self, final: bool = False) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(READ_CHUNK)
        except FileNotFoundError:
            chunk = b""
        self.offset += len(chunk)
        lines = self.split.feed(chunk)
        if final and len(chunk) < READ_CHUNK:
            lines += self.split.flush()
        return lines

    def raw(self) -> list[bytes]:
        """Complete lines as bytes (JSON lines: no sanitising)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(READ_CHUNK)
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        return chunk[:end].splitlines()


def _tail_start(path: Path, tail_bytes: int | None) -> int:
    """Where a replay of ``path`` starts: its last ``tail_bytes``, at a line start."""
    size = file_size(path)
    if tail_bytes is None or size <= tail_bytes:
        return 0
    with open(path, "rb") as f:
        f.seek(size - tail_bytes)
        data = f.read(min(tail_bytes, 1 << 16))
    cut = data.find(b"\n")
    return size - tail_bytes + (cut + 1 if cut >= 0 else 0)


async def follow_run(home: Path, run_id: str, *, tail_bytes: int | None = REPLAY_TAIL_BYTES,
                     adopt: bool = True, poll_s: float = POLL_S,
                     keep_colour: bool = False) -> AsyncIterator[RunEvent]:
    """The run's events until it has finished (then :class:`RunFinished` last). Log lines come sanitised
    for display; ``keep_colour`` keeps their SGR colours (for a terminal, not for a ``Log`` pane)."""
    store = RunStore(home)
    record = await asyncio.to_thread(store.get_run, run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    directory = record.directory
    events = _Tail(directory / EVENTS)
    if not events.path.exists():  # recorded without an events file: start from the record's states
        for event in node_states(record):
            yield event
    logs = {}
    for node in record.nodes:
        path = mirror_path(directory, node.node_rank)
        logs[node.node_rank] = _Tail(path, _tail_start(path, tail_bytes), keep_colour)
        if logs[node.node_rank].offset:
            skipped = logs[node.node_rank].offset
            yield NodeLines(run_id, node.node_rank,
                            (f"··· {skipped:,} earlier bytes are in {path} (fsdp-tui logs {run_id})",), skipped)
    metrics = _MetricsTail(directory)
    checked, finished, seen_finish, starts, started_at = 0.0, None, False, 0, 0.0
    while True:
        for raw in await asyncio.to_thread(events.raw):
            event = _decode(raw)
            if isinstance(event, RunFinished):
                finished, seen_finish = event, True
            elif event is not None:
                yield event
        for event in await asyncio.to_thread(_new_output, run_id, logs, metrics, finished is not None):
            yield event
        if finished is not None:
            yield finished
            return
        if time.monotonic() - checked > OWNER_CHECK_S:
            checked = time.monotonic()
            record = await asyncio.to_thread(store.get_run, run_id)
            if record is None or (record.summary.state.is_final and not seen_finish and not owned(home, run_id)):
                finished = _synthesised_end(store, run_id, record)
                continue
            final = record.summary.state.is_final
            # A final state with its end not yet written: an owner waiting for room to write the end is
            # said now (it writes it once there is room), not followed forever.
            if final or adopt:
                trouble = await asyncio.to_thread(_owner_trouble, home, run_id, 0 if final else starts)
                if trouble:
                    raise FollowGaveUp(trouble)
            if adopt and not final:
                if owned(home, run_id):
                    if time.monotonic() - started_at > OWNER_SETTLED_S:
                        starts = 0  # an owner that has lived a while counts as a good start
                elif await asyncio.to_thread(spawn_owner, home, run_id, adopt=True) is not None:
                    starts, started_at = starts + 1, time.monotonic()
        await asyncio.sleep(poll_s)


def _decode(raw: bytes) -> RunEvent | None:
    try:
        event = event_from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return None
    # Records of older versions kept metrics and lines in the events file too: those come from their files.
    return None if isinstance(event, (MetricsRecorded, NodeLines)) else event


class _MetricsTail:
    """The run's metrics: the reporter's file once it has records, else those read from log lines."""

    def __init__(self, directory: Path) -> None:
        self.reporter = _Tail(directory / METRICS)
        self.from_logs = _Tail(directory / LOG_METRICS)

    def records(self) -> list[MetricRecord]:
        source = self.reporter if file_size(self.reporter.path) or not self.from_logs.path.exists() else self.from_logs
        out = []
        for raw in source.raw():
            record = MetricRecord.from_json(raw.decode("utf-8", "replace"))
            if record is not None:
                out.append(record)
        return out


def _new_output(run_id: str, logs: dict[int, _Tail], metrics: _MetricsTail, final: bool) -> list[RunEvent]:
    out: list[RunEvent] = []
    for rank, tail in logs.items():
        while True:
            lines = tail.read(final)
            for i in range(0, len(lines), BATCH_LINES):
                out.append(NodeLines(run_id, rank, tuple(lines[i:i + BATCH_LINES]), tail.offset))
            if not lines or tail.offset >= file_size(tail.path):
                break
    out += [MetricsRecorded(run_id, r) for r in metrics.records()]
    return out


def _synthesised_end(store: RunStore, run_id: str, record) -> RunFinished:
    """The end of a run whose record is final but whose events never said so (cancelled without an
    owner, or recorded by an older version)."""
    from launcher.events import RunState

    triage = read_triage(record.directory) if record is not None else None
    state = record.summary.state if record is not None else RunState.FAILED
    return RunFinished(run_id, state, None, triage)


def node_states(record) -> list[RunEvent]:
    """A record's current node and run states as events (what a screen shows before replay arrives)."""
    out: list[RunEvent] = [NodeStateChanged(record.summary.run_id, n.node_rank, n.host, n.state, n.exit_code,
                                            n.detail) for n in record.nodes]
    out.append(RunStateChanged(record.summary.run_id, record.summary.state, record.summary.attempt))
    return out
