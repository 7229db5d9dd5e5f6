"""The run's record on this machine, written by its owner only.

Each node's log mirror (``nodes/<rank>.log``) and the metrics file (``metrics.jsonl``) are byte-exact
copies of the node's files: the size of the copy *is* the offset to read on from, so an owner that
dies mid-write and the one that adopts the run continue exactly where the copy ends (no line lost, none
twice). Metrics read from log lines (scripts without the reporter) go to ``log-metrics.jsonl``, which
is derived from the mirror and rebuilt whole when a run is adopted. State changes go to the store and
to ``events.jsonl``, which followers replay. Where these files lie, and how a reader reads them, is
:mod:`launcher.runs.core.layout`: readers never import this module.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from launcher.backends.base import UsageSample
from launcher.events import (
    GpuSample,
    GpuTelemetry,
    NodeState,
    NodeStateChanged,
    NodeUsage,
    RunEvent,
    RunFinished,
    RunState,
    RunStateChanged,
    last_attempt,
)
from launcher.runs.core.layout import (
    EVENTS,
    FORCED_NOTE,
    LOG_METRICS,
    METRICS,
    SAMPLES,
    event_line,
    file_size,
    mirror_path,
    read_forced,
    read_records,
    save_forced,
    save_resume_check,
    save_triage,
)
from launcher.runs.core.space import RecordUnwritable, SpaceWatch, is_write_failure, write_failure
from launcher.runs.core.store import RunStore
from launcher.runs.core.streams import LogMetrics
from launcher.runs.core.triage import TriageReport
from launcher.runs.owner.record_files import (
    append_lines,
    end_line,
    tail_after_newline,
    tail_text,
)
from trainer.wire.protocol import KIND_RESUME_CHECK, MetricRecord


class Recorder:
    """Appends to the run's local record and keeps the store's summary in step with it."""

    def __init__(self, store: RunStore, run_id: str, hosts: dict[int, str], *, parse_logs: LogMetrics | None) -> None:
        self.store, self.run_id, self.hosts = store, run_id, hosts
        self.dir = store.home / "runs" / run_id
        (self.dir / "nodes").mkdir(parents=True, exist_ok=True)
        self.attempt = 1
        self.log_shift: dict[int, int] = {}
        """Per rank, the bytes of its log copy written before its node's current log began (a node swapped
        in starts its log at 0 where the copy holds the failed node's): the copy's size less this is the
        offset to read on from. Kept with the run's swaps, so an owner that adopts the run knows it."""
        self.stream_shift: dict[str, int] = {}
        """The same for node 0's metrics and samples files (``metrics.jsonl``, ``samples.jsonl``), once another
        node is node 0."""
        self.parse_logs = parse_logs
        self.metrics_rest = tail_after_newline(self.dir / METRICS)
        self.log_rest = b""
        self.reporter_seen = file_size(self.dir / METRICS) > 0
        self.last_train_step: int | None = None
        """The newest training step recorded (what the stall watch follows)."""
        self.new_records: list[MetricRecord] = []
        """Records not yet handed to the tracking sink (see :meth:`take_records`)."""
        self.on_records: Callable[[list[MetricRecord]], None] | None = None
        """Also called with each batch of new metrics records (the owner's swaps settle on them)."""
        self.on_gpus: Callable[[int, tuple[GpuSample, ...], float], None] | None = None
        """Also called with ``(rank, samples, time)`` for each GPU sample (the owner's idle watch)."""
        self.space = SpaceWatch(store.home)
        self.unwritten: list[Callable[[], object]] = []
        """State changes, events and summaries the disk refused, in order: written by :meth:`flush_unwritten`
        once it can (nothing after the first refused write is written before it)."""
        self.write_error: str | None = None
        """Why the first refused write was refused (the disk's words and its free space)."""
        self.last_state: RunState | None = None
        """The last state this recorder set (written or still kept for later)."""
        try:
            self._rebuild_log_metrics()
        except (OSError, sqlite3.OperationalError) as err:
            if not is_write_failure(err):
                raise
            self.write_error = write_failure(store.home, err)
        self._refresh_summary(self.records())
        self.forced = read_forced(self.dir)
        """What the run was forced past (empty: nothing), kept over a change of owner."""

    # -- offsets are the sizes of the copies -------------------------------------------------------

    def log_offset(self, rank: int) -> int:
        return file_size(mirror_path(self.dir, rank)) - self.log_shift.get(rank, 0)

    def use_nodes(self, nodes: list[tuple[int, str, str]],
                  old_rank: dict[int, int | None]) -> tuple[dict[int, int], dict[str, int]]:
        """The node set after a swap: ``(rank, host, node_dir)`` each, and for each rank the rank its node had
        before (``None``: a node swapped in, whose log starts at 0). Each rank's copy goes on where it ends,
        reading its node's log from where that node's log was read to; a new node 0's metrics and samples
        (only rank 0 writes them) from their first byte. A copy that ends inside a line (a node that died
        mid-write) is ended first, so the next node's first line stays whole. Returns the new shifts (per
        rank's log, per stream)."""
        offsets = {old: self.log_offset(old) for old in self.hosts}
        hosts = {rank: host for rank, host, _ in nodes}
        shift = {}
        for rank in hosts:
            before = old_rank.get(rank)
            if before != rank:
                end_line(mirror_path(self.dir, rank))
            size = file_size(mirror_path(self.dir, rank))
            shift[rank] = size - (offsets.get(before, 0) if before is not None else 0)
        if old_rank.get(0) != 0:  # another node writes the metrics now, from the start of its own file
            for name in (METRICS, SAMPLES):
                end_line(self.dir / name)
                self.stream_shift[name] = file_size(self.dir / name)
            self.metrics_rest = b""
        self.hosts, self.log_shift = dict(hosts), {r: s for r, s in shift.items() if s}
        self.write(self.store.set_nodes, self.run_id, nodes)
        return self.log_shift, dict(self.stream_shift)

    def metrics_offset(self) -> int:
        return file_size(self.dir / METRICS) - self.stream_shift.get(METRICS, 0)

    def samples_offset(self) -> int:
        return file_size(self.dir / SAMPLES) - self.stream_shift.get(SAMPLES, 0)

    # -- node output -------------------------------------------------------------------------------

    # -- writes the disk may refuse ----------------------------------------------------------------

    def write(self, fn: Callable[..., object], *args: object) -> None:
        """``fn(*args)`` now, or kept for later when the disk refuses it (or refused an earlier one)."""
        if not self.unwritten:
            try:
                fn(*args)
                return
            except (OSError, sqlite3.OperationalError) as err:
                if not is_write_failure(err):
                    raise
                self.write_error = self.write_error or write_failure(self.store.home, err)
        self.unwritten.append(functools.partial(fn, *args))

    def flush_unwritten(self) -> bool:
        """Write what the disk refused, in order; whether all of it is written now."""
        while self.unwritten:
            try:
                self.unwritten[0]()
            except (OSError, sqlite3.OperationalError) as err:
                if not is_write_failure(err):
                    raise
                return False
            self.unwritten.pop(0)
        return True

    def check_room(self, more_bytes: int = 0) -> None:
        """Raises :class:`RecordUnwritable` when the record cannot go on (a refused write, or the disk
        below its floor): the run must stop while its end can still be written."""
        if self.write_error:
            raise RecordUnwritable(self.write_error)
        problem = self.space.check(more_bytes)
        if problem:
            raise RecordUnwritable(f"{problem}; the job was stopped")

    def _append_copy(self, path: Path, data: bytes) -> None:
        """Append to a byte-exact copy; a refused write is undone (the copy's size stays its offset)."""
        self.check_room(len(data))
        with open(path, "ab") as f:
            size = f.tell()
            try:
                f.write(data)
                f.flush()
            except OSError as err:
                if not is_write_failure(err):
                    raise
                f.truncate(size)
                self.write_error = write_failure(self.store.home, err)
                raise RecordUnwritable(self.write_error) from None

    # -- node output -------------------------------------------------------------------------------

    def append_log(self, rank: int, data: bytes) -> None:
        if not data:
            return
        self._append_copy(mirror_path(self.dir, rank), data)
        if rank == 0 and self.parse_logs is not None and not self.reporter_seen:
            data, self.log_rest = self.log_rest + data, b""
            *lines, self.log_rest = data.split(b"\n")
            self._log_lines(lines)

    def _log_lines(self, lines: Iterable[bytes]) -> None:
        parse = self.parse_logs
        if parse is None:
            return
        found = []
        now = time.time()
        for raw in lines:
            record = parse.parse(raw.decode("utf-8", "replace"))
            if record is not None:
                # When it was read: a log line has no time of its own, and the estimate times steps by it.
                found.append(record if record.time is not None else dataclasses.replace(record, time=now))
        if found:
            self.write(append_lines, self.dir / LOG_METRICS, [r.to_json() for r in found])
            self._took(found)

    def append_metrics(self, data: bytes) -> None:
        if not data:
            return
        self._append_copy(self.dir / METRICS, data)
        data, self.metrics_rest = self.metrics_rest + data, b""
        *lines, self.metrics_rest = data.split(b"\n")
        records = [r for r in (MetricRecord.from_json(x.decode("utf-8", "replace")) for x in lines) if r is not None]
        if records:
            if not self.reporter_seen:
                self.reporter_seen = True  # the script reports: its log lines are not metrics
                self.new_records.clear()
            self._took(records)

    def append_samples(self, data: bytes) -> None:
        """Node 0's samples file, copied byte for byte (read back through :mod:`launcher.runs.core.samples`)."""
        if data:
            self._append_copy(self.dir / SAMPLES, data)

    def _took(self, records: list[MetricRecord]) -> None:
        self.new_records.extend(records)
        checks = [r for r in records if r.kind == KIND_RESUME_CHECK]
        if checks:  # the newest attempt's badge, kept apart from the metrics it would be hard to find in
            self.write(save_resume_check, self.dir, checks[-1])
        steps = [r.step for r in records if r.kind == "train"]
        if steps:
            self.last_train_step = max(steps + [self.last_train_step or 0])
        self._refresh_summary(records)
        if self.on_records is not None:
            self.on_records(records)

    def trained(self) -> bool:
        """Whether any training step was recorded (by this owner, or before it adopted the run)."""
        return self.last_train_step is not None or any(r.kind == "train" for r in self.records())

    def take_records(self) -> list[MetricRecord]:
        records, self.new_records = self.new_records, []
        return records

    def records(self) -> list[MetricRecord]:
        """Every metrics record of the run so far, from the source in use (the reporter's, else the logs')."""
        path = self.dir / (METRICS if self.reporter_seen else LOG_METRICS)
        return read_records(path)

    def _rebuild_log_metrics(self) -> None:
        """``log-metrics.jsonl`` from the whole mirror of node 0 (it is derived, never appended blindly)."""
        target = self.dir / LOG_METRICS
        if self.parse_logs is None or self.reporter_seen:
            return
        mirror = mirror_path(self.dir, 0)
        found: list[str] = []
        # The times the records were read at, kept: a log line has none of its own.
        before = read_records(target)
        if mirror.exists():
            with open(mirror, "rb") as f:
                data = f.read()
            *lines, self.log_rest = data.split(b"\n")
            for raw in lines:
                record = self.parse_logs.parse(raw.decode("utf-8", "replace"))
                if record is not None:
                    i = len(found)
                    if i < len(before) and before[i].step == record.step and record.time is None:
                        record = dataclasses.replace(record, time=before[i].time)
                    found.append(record.to_json())
        tmp = target.with_suffix(".tmp")
        tmp.write_text("".join(x + "\n" for x in found))
        os.replace(tmp, target)

    def _refresh_summary(self, records: list[MetricRecord]) -> None:
        if not records:
            return
        train = [r for r in records if r.loss is not None and r.kind == "train"]
        evals = [r.eval_loss for r in records if r.eval_loss is not None]
        self.write(functools.partial(
            self.store.record_metric_summary,
            self.run_id, last_loss=train[-1].loss if train else None,
            best_eval_loss=min(evals) if evals else None, step=max(r.step for r in records),
            max_steps=next((r.max_steps for r in reversed(records) if r.max_steps), None)))

    # -- states and events -------------------------------------------------------------------------

    def emit(self, event: RunEvent, at: float | None = None) -> None:
        self.write(append_lines, self.dir / EVENTS, [event_line(event, at)])

    def set_state(self, state: RunState, detail: str = "", at: float | None = None) -> None:
        """``at``: when it happened, when that was before now (a job that ended before its owner looked)."""
        self.last_state = state
        now = time.time() if at is None else at
        self.write(self.store.set_state, self.run_id, state, self.attempt, detail, now)
        self.emit(RunStateChanged(self.run_id, state, self.attempt, detail), now)

    def set_node(self, rank: int, state: NodeState, code: int | None = None, detail: str = "") -> None:
        self.write(self.store.set_node, self.run_id, rank, state, code, detail)
        self.emit(NodeStateChanged(self.run_id, rank, self.hosts.get(rank, ""), state, code, detail))

    def gpus(self, rank: int, samples: tuple[GpuSample, ...]) -> None:
        self.emit(GpuTelemetry(self.run_id, rank, samples))
        if self.on_gpus is not None:
            self.on_gpus(rank, samples, time.time())

    def usage(self, rank: int, sample: UsageSample) -> None:
        self.emit(NodeUsage(self.run_id, rank, sample.cpu_pct, sample.rss_mib, sample.processes, sample.sampled_at,
                            sample.net_rx_mb, sample.net_tx_mb))

    def note_forced(self, refusals: list[str]) -> None:
        """A launch forced past the cheap checks: say so now and in the run's final state, even a success
        (a GPU workload that trained on CPU succeeded, but not as asked)."""
        self.forced = FORCED_NOTE + "; ".join(refusals)
        save_forced(self.dir, self.forced)
        self.set_state(RunState.PREFLIGHT, self.forced)

    def finished(self, state: RunState, exit_code: int | None, triage: TriageReport | None,
                 at: float | None = None, detail: str = "") -> None:
        """The run's end; ``detail``: what its state says when no triage does (a run that trained nothing)."""
        record = self.store.get_run(self.run_id)
        if (record is None or not record.summary.state.is_final) and not (
                self.unwritten and self.last_state is not None and self.last_state.is_final):
            self.set_state(state, (triage.summary if triage else "") or detail or self.forced, at)
        self.emit(RunFinished(self.run_id, state, exit_code, triage))

    def write_triage(self, report: TriageReport) -> None:
        self.write(save_triage, self.dir, report)

    def node_logs(self, max_bytes: int = 2_000_000) -> dict[int, str]:
        """Each node's log of the last attempt (what triage reads)."""
        out = {}
        for rank in self.hosts:
            path = mirror_path(self.dir, rank)
            out[rank] = last_attempt(tail_text(path, max_bytes)) if path.exists() else ""
        return out
