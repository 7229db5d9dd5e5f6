"""The owner's sends to MLflow: a round at a time, each off the event loop in a daemon thread of its own, a
failure said once in the run's state while the run goes on, and the run's end sent within a bound (the rest
left marked for a later sender, :mod:`launcher.runs.core.pending`)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

from launcher.events import RunState
from launcher.runs.core import pending
from launcher.runs.core.layout import read_swaps
from launcher.runs.core.samples import read_samples
from launcher.runs.core.store import RunStore
from launcher.runs.core.usage import usage_totals
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.send_later import artifacts
from launcher.runs.owner.tracking import Status, Tracker

MLFLOW_STATUS: dict[RunState, Status] = {RunState.SUCCEEDED: "FINISHED", RunState.CANCELLED: "KILLED"}
TRACKING_END_S = 20.0
"""How long the owner, once the run's end is recorded, goes on sending it to a remote MLflow server before
it leaves the rest to a later sender (:mod:`launcher.runs.core.pending`). A store that failed in the last
30 s is not waited for at all."""
LOCAL_TRACKING_END_S = 120.0
"""The same for a local SQLite store: no network to fail, only other writers of the file to wait for
(several first launches at once create and migrate it one after the other), tried again within this
bound while another holds the file (:data:`END_RETRY_S`)."""
END_RETRY_S = 2.0
"""While the run's end is sent to a local store, a try that found the store held by another writer or reader
(an ``mlflow ui`` on the same database, another owner: :attr:`Tracker.contended`) is tried again this soon,
not 30 s later. A store that cannot be opened is not tried again before the run's owner leaves."""
END_GROWN_TRIES = 3
"""Sends of the run's end again, at once, when a send that went through left something unsent: lines the
record gained meanwhile."""


def in_thread(fn: Callable[[], object]) -> asyncio.Future:
    """``fn()`` in a daemon thread of its own, as a future of this loop. Not the loop's executor: its
    threads are waited for when the process ends, and a tracking call must never hold the owner there."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result: object, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def run() -> None:
        try:
            result, error = fn(), None
        except BaseException as err:  # noqa: BLE001 - handed to the awaiting side, whatever it is
            result, error = None, err
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the loop has ended: nobody waits for it any more

    threading.Thread(target=run, name="tracking", daemon=True).start()
    return future


class TrackingRounds:
    """Owns the run's :class:`Tracker` for its owner: the round in flight, the lock the tracking threads
    share, and what was last said of a failure."""

    def __init__(self, home: Path, run_id: str, directory: Path, tracker: Tracker, rec: Recorder, store: RunStore,
                 *, note: Callable[[str], None], say: Callable[[str], None]) -> None:
        self.home, self.run_id, self.dir = home, run_id, directory
        self.tracker, self.rec, self.store = tracker, rec, store
        self.note = note
        """Tells followers what the owner is stuck on (its lock's note)."""
        self.say = say
        """A line in the owner's log."""
        self.tracking: asyncio.Future | None = None
        """The tracking round in flight (one at a time, off the event loop; never waited for by the run)."""
        self.tracking_lock = threading.Lock()
        """Held by whichever thread uses the tracker (a round, the run's end)."""
        self.tracking_said: str | None = None
        self.ended = False
        """The run's end is recorded: tracking failures are no longer said as the run's state."""

    def round(self) -> None:
        """Start a tracking round unless one is in flight; how it went is said as soon as it is known."""
        if self.tracking is not None and not self.tracking.done():
            return
        self.tracking = in_thread(self._sync)
        self.tracking.add_done_callback(
            lambda done: self._said(not done.cancelled() and not done.exception() and bool(done.result())))

    def _sync(self) -> bool:
        """MLflow up to date with the records and the generation samples (in a tracking thread)."""
        with self.tracking_lock:
            self.rec.take_records()
            source = "metrics" if self.rec.reporter_seen else "log-metrics"
            return (self.tracker.sync(self.rec.records(), source) and self.tracker.sync_samples(read_samples(self.dir))
                    and self.tracker.sync_system() and self.tracker.sync_swaps(read_swaps(self.dir)))

    def _said(self, ok: bool) -> None:
        """A failure is said once (and again when it changes), while the run goes on."""
        if ok or self.ended:
            self.tracking_said = None if ok else self.tracking_said
            return
        if self.tracker.error != self.tracking_said:
            self.tracking_said = self.tracker.error
            record = self.store.get_run(self.run_id)
            state = record.summary.state if record else RunState.RUNNING
            if not state.is_final:
                self.rec.set_state(state, f"tracking (MLflow) failed, the run goes on: {self.tracker.error}")

    def send_end(self, state: RunState) -> asyncio.Future | None:
        """The run's end handed to MLflow in a tracking thread (``None``: no MLflow, or its state cannot be
        kept); :meth:`wait_end` waits for it."""
        if self.tracker.sink is None:
            return None
        try:
            self.tracker.ended(MLFLOW_STATUS.get(state, "FAILED"), usage_totals(self.home, self.run_id))
            pending.mark(self.dir, "the run's end is being sent")
            self.note(pending.SENDING)
            return in_thread(self._send_end)
        except OSError as err:
            self.say(f"cannot keep the run's MLflow state: {err}")
            return None

    def _end_limit(self) -> float:
        return LOCAL_TRACKING_END_S if self.tracker.local else TRACKING_END_S

    def _send_end(self) -> bool:
        """The records and the run's end to MLflow (in a tracking thread, after any round in flight). A
        local store held by another writer or reader is tried again every :data:`END_RETRY_S` while
        :meth:`_end_limit` lasts, and what the record gained while it was sent (a node's last sample
        written meanwhile) is sent at once, a few times at most; any other failure leaves the rest to a
        later sender at once."""
        deadline = time.monotonic() + self._end_limit()
        grown = 0
        while True:
            if self._send_end_once():
                return True
            tracker = self.tracker
            if tracker.error is None:  # everything sent without a failure, yet more is there now
                grown += 1
                if grown > END_GROWN_TRIES:
                    return False
                continue
            if not tracker.contended or time.monotonic() + END_RETRY_S >= deadline:
                return False
            time.sleep(END_RETRY_S)
            tracker.retry_at = 0.0  # held by another, not broken: asked again now

    def _send_end_once(self) -> bool:
        with self.tracking_lock:
            source = "metrics" if self.rec.reporter_seen else "log-metrics"
            records, samples = self.rec.records(), read_samples(self.dir)
            sent = (self.tracker.sync(records, source) and self.tracker.sync_samples(samples)
                    and self.tracker.sync_system(to_end=True) and self.tracker.sync_swaps(read_swaps(self.dir))
                    and self.tracker.finish(artifacts(self.dir)))
            return sent and not self.tracker.unsent(len(records), len(samples))

    async def wait_end(self, tracked: asyncio.Future) -> None:
        """What tracking can send of the run's end within :data:`TRACKING_END_S` (a local store:
        :data:`LOCAL_TRACKING_END_S`); the rest is left marked for a later sender."""
        limit = self._end_limit()
        try:
            sent = await asyncio.wait_for(asyncio.shield(tracked), limit)
        except asyncio.TimeoutError:
            sent = False
            self.tracker.error = self.tracker.error or f"no answer within {limit:.0f} s"
        except Exception as err:  # noqa: BLE001 - tracking is not the job
            sent, self.tracker.error = False, f"{type(err).__name__}: {err}"
        self.note("")
        if sent:
            pending.clear(self.dir)
        else:
            pending.mark(self.dir, self.tracker.error or "not sent yet")
            self.say(f"MLflow not up to date, sent later (fsdp-tui mlflow sync {self.run_id}): {self.tracker.error}")
