"""MLflow for one run, kept apart from the run's fate: a tracking failure is reported and retried,
never fatal, never in the way of the run's own record, and the MLflow run is brought up to date from
the run's own records when the store works again.

Every call is bounded: MLflow's own HTTP retries (minutes per call by default) are turned off and its
request timeout set to seconds (:data:`~launcher.runs.owner.mlflow_sink.MLFLOW_HTTP`), a remote store is asked whether it answers
at all before anything else (:func:`probe`), and one failure stops the round until :data:`RETRY_S` later.
No lock is held across a network call: writes to a local SQLite store (this data dir's default) hold
``mlflow.lock`` (an ``flock``, waited for at most :data:`LOCK_WAIT_S`), so concurrent owners never
create or migrate that file at the same moment; a remote store takes its writers' calls itself.

What has been logged is remembered in ``mlflow.json`` beside the run's record (its MLflow run id, the
records sent, how far the nodes' system metrics in ``events.jsonl`` were sent, the run's end once asked
for and whether it was sent), so an owner that adopts the run,
``fsdp-tui mlflow sync RUN`` and the sender the next look starts (:mod:`launcher.runs.core.pending`)
re-open the same MLflow run and send only what is missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import socket
import time
import urllib.parse
from pathlib import Path
from typing import Literal

from launcher.runs.core.layout import (
    EVENTS,
    STATE_FILE,
    file_size,
    read_mlflow_state,
    read_options,
    save_mlflow_state,
)
from launcher.runs.core.mlflow_notes import EndStatus, MlflowNotes, OwedEnd, SystemSent
from launcher.runs.owner.mlflow_sink import MlflowSink
from launcher.runs.owner.system_metrics import read_from, to_metrics
from launcher.workload.plan import RunPlan
from trainer.wire.protocol import KIND_RESUME_CHECK, MetricRecord

LOCK_FILE = "mlflow.lock"
RETRY_S = 30.0
"""After a failure, tracking waits this long before trying the store again."""
LOCK_WAIT_S = 120.0
"""Longest wait for the local store's lock (held only for local file writes, never across a network call:
the first writer of a fresh store creates and migrates it, which takes a while on a busy machine); past
it the round is given up and tried again later. Waited for in a tracking thread, never by the run."""
PROBE_TIMEOUT_S = 3.0
"""A remote store that does not answer a connection and a request within this long is down."""
Status = EndStatus
RUN_TAG = "fsdp_tui.run_id"
"""The MLflow run's tag naming the launch it records: one MLflow run per launch, found by it."""


class TrackingBusy(Exception):
    """The local store's lock was held longer than :data:`LOCK_WAIT_S` by another writer."""


@contextlib.contextmanager
def store_lock(home: Path):
    """Held around every write of this data dir's local SQLite store (processes and threads alike);
    :class:`TrackingBusy` when another writer holds it for longer than :data:`LOCK_WAIT_S`."""
    with open(Path(home) / LOCK_FILE, "a") as f:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TrackingBusy(f"the tracking store's lock {Path(home) / LOCK_FILE} was held for "
                                       f"over {LOCK_WAIT_S:.0f} s by another writer") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def probe(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise ``ConnectionError`` unless an ``http(s)`` tracking server accepts a connection and answers a
    request within ``timeout_s`` in all (any HTTP answer will do); other stores are not probed."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s) as s:
            if parts.scheme == "http":
                s.settimeout(max(0.1, deadline - time.monotonic()))
                s.sendall(f"GET /health HTTP/1.0\r\nHost: {parts.hostname}\r\n\r\n".encode())
                if not s.recv(1):
                    raise ConnectionError("it closed the connection without answering")
    except TimeoutError:
        raise ConnectionError(f"no answer from {parts.hostname}:{port} within {timeout_s:.0f} s") from None
    except OSError as err:
        raise ConnectionError(f"cannot reach {parts.hostname}:{port}: {err.strerror or err}") from None


@contextlib.contextmanager
def writing(home: Path, sink: MlflowSink):
    """Around a write through ``sink`` by anyone (an owner, a sweep's driver): the local store's lock, or
    for a remote store a quick :func:`probe` instead (a dead server fails in seconds; no lock waits on it)."""
    if sink.uri.startswith("sqlite:"):
        with store_lock(home):
            yield
    else:
        probe(sink.uri)
        yield


class Tracker:
    """Blocking calls, bounded: the owner runs them off its event loop and never waits on them for the
    run's own record."""

    def __init__(self, home: Path, plan: RunPlan, run_dir: Path) -> None:
        cfg = plan.workload.mlflow
        self.enabled = cfg.enabled
        self.home, self.plan, self.path = Path(home), plan, run_dir / STATE_FILE
        self.sink = MlflowSink(cfg.tracking_uri, cfg.experiment or plan.workload.experiment_name,
                               plan.workload.mlflow_name or plan.run_id, self.home) if cfg.enabled else None
        self.local = self.sink is not None and self.sink.uri.startswith("sqlite:")
        self.state = self._load()
        self.opened = False
        self.error: str | None = self.state.error
        """The last failure, in words; ``None`` while tracking works."""
        self.retry_at = 0.0
        self.contended = False
        """The last failure was another writer or reader holding the local store (its lock, or SQLite's
        ``database is locked``): it lets go in moments, unlike a store that cannot be opened."""

    def _load(self) -> MlflowNotes:
        return read_mlflow_state(self.path.parent)

    def _save(self) -> None:
        save_mlflow_state(self.path.parent, self.state)

    @property
    def mlflow_run_id(self) -> str | None:
        return self.state.run_id

    @property
    def waiting(self) -> bool:
        """A failure happened less than :data:`RETRY_S` ago: the store is not asked again before then."""
        return self.error is not None and time.monotonic() < self.retry_at

    def unsent(self, records: int, samples: int = 0) -> bool:
        """Whether anything of the run is not in MLflow yet (its MLflow run itself, of ``records`` records,
        ``samples`` steps of generation samples, the nodes' system metrics, or its end)."""
        if self.sink is None:
            return False
        end = self.state.end
        return (not self.mlflow_run_id or self.state.synced < records or self.state.samples_synced < samples
                or self.state.system.offset < file_size(self.path.parent / EVENTS)
                or (end is not None and not end.sent))


    def _guard(self, what, *args, write: bool = True) -> bool:
        """Run ``what(*args)`` (a ``write`` under the store's lock if it is local); a failure is kept in
        ``error``, never raised."""
        try:
            if self.local and write:
                MlflowSink.warm()
                with store_lock(self.home):
                    what(*args)
            else:
                what(*args)
        except Exception as err:  # noqa: BLE001 - tracking is not the job: any failure is reported, not fatal
            self.error = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
            self.retry_at = time.monotonic() + RETRY_S
            self.contended = self.local and (isinstance(err, TrackingBusy) or "database is locked" in str(err))
            self._remember_error()
            return False
        if self.error is not None:
            self.error, self.contended = None, False
            self._remember_error()
        return True

    def _remember_error(self) -> None:
        self.state.error = self.error
        with contextlib.suppress(OSError):
            self._save()

    def _sink(self) -> MlflowSink:
        """The sink of a run whose MLflow logging is on (every caller asked ``self.sink`` first)."""
        if self.sink is None:
            raise RuntimeError("MLflow logging is off for this run")
        return self.sink

    def _check(self) -> None:
        """Whether the store can be reached at all: seconds, no MLflow import, no lock."""
        sink = self._sink()
        probe(sink.uri)
        sink.check_local()

    def _open(self) -> None:
        sink = self._sink()
        if self.mlflow_run_id:
            sink.reopen(self.mlflow_run_id)
        else:
            tags = {**read_options(self.path.parent).tags, RUN_TAG: self.plan.run_id}
            run_id = sink.start(self.plan.workload.parameters, tags, key=RUN_TAG)
            self.state.run_id, self.state.source, self.state.synced = run_id, "metrics", 0
            self._save()
        self.opened = True

    def _ready(self) -> bool:
        return self.opened or (self._guard(self._check, write=False) and self._guard(self._open))

    def _trusted(self, records: list[MetricRecord]) -> list[MetricRecord]:
        """``records`` without a resume check when the launcher knows the run did not resume: MLflow's
        badge, like ``show``'s, is never the job's word alone (:mod:`launcher.runs.core.resume_badge`)."""
        if not any(r.kind == KIND_RESUME_CHECK for r in records):
            return records
        from launcher.runs.core.resume_badge import not_a_resume
        from launcher.runs.core.store import RunStore
        from launcher.workload.plan import plan_to_json

        record = RunStore(self.home).get_run(self.plan.run_id)
        if not not_a_resume(plan_to_json(self.plan).get("workload"), record.summary.attempt if record else 1):
            return records
        return [r for r in records if r.kind != KIND_RESUME_CHECK]

    def sync(self, all_records: list[MetricRecord], source: Literal["metrics", "log-metrics"]) -> bool:
        """Log what ``all_records`` (every record of the run from ``source``) has beyond what is logged."""
        sink = self.sink
        if sink is None:
            return True
        if self.waiting or not self._ready():
            return False
        if self.state.source != source:
            self.state.source, self.state.synced = source, 0
        synced = self.state.synced
        todo = all_records[synced:]
        if not todo:
            return True

        def log() -> None:
            sink.log_records(self._trusted(todo))
            self.state.synced = synced + len(todo)
            self._save()

        return self._guard(log)

    def sync_samples(self, sets: list) -> bool:
        """Append the samples steps beyond those logged to the MLflow run's table (``sets``: every step's
        answers, clean, oldest first); the count logged is kept with the rest of ``mlflow.json``."""
        sink = self.sink
        if sink is None or not self.opened:
            return True
        logged = self.state.samples_synced
        todo = sets[logged:]
        if not todo:
            return True

        def log() -> None:
            sink.log_samples(todo)
            self.state.samples_synced = logged + len(todo)
            self._save()

        return self._guard(log)

    def sync_system(self, to_end: bool = False) -> bool:
        """Send the nodes' usage samples recorded since the last send as system metrics
        (:mod:`launcher.runs.owner.system_metrics`): a bounded slice of the record per round, one round
        unless ``to_end`` (the run's end: every round up to the record's end)."""
        sink = self.sink
        if sink is None or not self.opened:
            return True
        while True:
            offset, steps = self.state.system.offset, dict(self.state.system.steps)
            lines, end = read_from(self.path.parent / EVENTS, offset)
            if end == offset:
                return True
            metrics = to_metrics(lines, steps)

            def log(metrics=metrics, end=end, steps=steps) -> None:
                if metrics:
                    sink.log_system(metrics)
                self.state.system = SystemSent(end, steps)
                self._save()

            # Lines of no sample (state changes) send nothing: no store lock is taken for them.
            if not self._guard(log, write=bool(metrics)):
                return False
            if not to_end:
                return True

    def sync_swaps(self, swaps: list) -> bool:
        """The run's swaps (:class:`~launcher.runs.core.swaps.Swap`, oldest first) as tags of its MLflow run:
        ``fsdp_tui.swaps`` (how many), ``fsdp_tui.swap.N`` (each in words) and ``fsdp_tui.recovered`` (every
        swap's resume proved itself); sent again only when they changed."""
        sink = self.sink
        if sink is None or not self.opened or not swaps:
            return True
        tags = {"fsdp_tui.swaps": str(len(swaps)),
                "fsdp_tui.recovered": "yes" if all(s.recovered for s in swaps) else
                ("pending" if not swaps[-1].settled else "no")}
        tags.update({f"fsdp_tui.swap.{s.number}": s.words()[:5000] for s in swaps})
        if self.state.swap_tags == tags:
            return True

        def log() -> None:
            sink.set_tags(tags)
            self.state.swap_tags = tags
            self._save()

        return self._guard(log)

    def ended(self, status: Status, totals: dict[str, float] | None) -> None:
        """Remember the run's end (its MLflow status, GPU-hours and cost) before it is sent: whoever sends
        it later sends this, as the run ended."""
        if self.sink is None:
            return
        self.state.end = OwedEnd(status, dict(totals or {}))
        self._save()

    def finish(self, artifacts: list[Path]) -> bool:
        """Send the remembered end (:meth:`ended`) and ``artifacts``, and end the MLflow run."""
        sink = self.sink
        if sink is None:
            return True
        end = self.state.end
        if end is None or end.sent:
            return True
        if self.waiting or not self._ready():
            return False

        def send() -> None:
            sink.finish(end.status, artifacts, end.totals)
            end.sent = True
            self._save()

        return self._guard(send)
