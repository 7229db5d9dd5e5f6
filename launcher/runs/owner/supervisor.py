"""The run's owner: ``python -m launcher.runs.owner.supervisor --home HOME RUN_ID [--adopt]``.

Started detached by whoever launches the run (the app, ``run``, relaunch, resume) or adopts it (the
next command that lists or opens runs, when the owner died). It takes the run's lock, runs the policy
against the run's backend, and alone writes the run's records to the end: node log mirrors, metrics,
state, triage, MLflow. It needs no terminal and outlives the one that started it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from launcher.backends.base import Backend
from launcher.backends.registry import backend_for, here_checkpoint_files
from launcher.events import RunState
from launcher.paths import private_files, run_dir
from launcher.runs.core.continuing import max_steps_of, recorded, trained_nothing
from launcher.runs.core.estimates import PROBE_TAG, settle
from launcher.runs.core.layout import load_plan, read_options, save_plan
from launcher.runs.core.notifying import notify_run, notify_wanted
from launcher.runs.core.ownership import (
    KeptEnd,
    OwnerLock,
    cancel_requested,
    request_cancel,
    take_stacks_request,
)
from launcher.runs.core.safe_step import newest_of_run, save_safe_step
from launcher.runs.core.space import end_wait_s
from launcher.runs.core.store import RunStore, StoreDamaged
from launcher.runs.core.streams import LogMetrics
from launcher.runs.core.swaps import Swap
from launcher.runs.core.triage import TriageReport
from launcher.runs.owner.ckpt_copy import Endpoint
from launcher.runs.owner.idle import IdleGuard
from launcher.runs.owner.keeper import CheckpointKeeper
from launcher.runs.owner.policy import LaunchFailed, Outcome, RunPolicy
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.recovery import NodeRecovery
from launcher.runs.owner.settings import Settings
from launcher.runs.owner.tracking import Tracker
from launcher.runs.owner.tracking_rounds import TrackingRounds
from launcher.secrets import MissingSecrets, SecretStore
from launcher.workload.plan import RunPlan

SYNC_EVERY_S = 2.0
FLUSH_RETRY_S = 2.0


class Supervisor:
    def __init__(self, home: Path, run_id: str, plan: RunPlan, *, adopted: bool, restart: bool = False) -> None:
        self.home, self.run_id, self.plan, self.adopted, self.restart = home, run_id, plan, adopted, restart
        self.lock_note: Callable[..., None] = lambda text, end=None: None
        """Tells followers what this owner is stuck on (:meth:`OwnerLock.note`)."""
        self.finished_at = 0.0
        """When the run's end was recorded (or tried: a full disk may refuse it)."""
        self.dir = run_dir(home, run_id)
        self.store = RunStore(home)
        record = self.store.get_run(run_id)
        w = plan.workload
        parse = LogMetrics(w.metrics.pattern) if w.metrics.from_logs and not w.uses_builtin_trainer else None
        self.rec = Recorder(self.store, run_id, {n.node_rank: n.host_display for n in plan.nodes}, parse_logs=parse)
        self.rec.attempt = record.summary.attempt if record else 1
        self.tracking = TrackingRounds(home, run_id, self.dir, Tracker(home, plan, self.dir), self.rec, self.store,
                                       note=lambda text: self.lock_note(text), say=_say)
        """MLflow sent to, a round at a time off the loop, and the run's end at its end."""
        self.stall_told: str | None = None
        self.swap_told: asyncio.Future | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        """The owner's event loop, once it runs (what other threads hand work to)."""
        """The notification of a settled swap, while it is sent."""
        self.idle = IdleGuard(w.metrics.idle_policy)
        self.rec.on_gpus = self.idle.saw
        self.backend = backend_for(plan, on_link=lambda *a: self.policy.on_link(*a))
        options = read_options(self.dir)
        settings = Settings(max_retries=w.max_retries, timeout_s=w.timeout_minutes * 60 if w.timeout_minutes else None,
                            preflight=not options.force, checked=options.checked,
                            stall_factor=w.metrics.stall_factor, stall_min_s=w.metrics.stall_min_s,
                            max_resubmits=w.compute.slurm.max_resubmits if w.compute.slurm else 0)
        self.resume_source: Backend | None = None
        """The backend of the run whose checkpoint this one resumes from, when it is brought here."""
        self.keeper = CheckpointKeeper(self.dir, backend_for, here_checkpoint_files, say=self._say_state,
                                       resume_from=self._resume_from)
        self.recovery = NodeRecovery(self.rec, home, run_id, w.recovery, w.swaps_allowed,
                                     checks_resume=w.uses_builtin_trainer, on_settled=self._swap_settled)
        """A failed node replaced by a spare (or the run shrunk) without anyone awake."""
        self.policy = RunPolicy(self.backend, self.rec, settings, secrets=self.secrets,
                                cancel_requested=lambda: cancel_requested(self.dir),
                                stacks_requested=lambda: take_stacks_request(self.dir),
                                on_plan=lambda p: save_plan(self.dir, p), keeper=self.keeper,
                                recovery=self.recovery if w.swaps_allowed else None,
                                make_backend=lambda p, watch: backend_for(p, on_link=watch))

    def _swap_settled(self, swap: Swap) -> None:
        """A swap's first step came (said from the thread that records metrics): the user is told how the
        run recovered, in the background of the owner's loop."""
        def tell() -> None:
            self.swap_told = asyncio.ensure_future(self._notify("recovered"))
        if self.loop is not None:
            self.loop.call_soon_threadsafe(tell)

    def _say_state(self, text: str) -> None:
        """A line in the run's state, keeping the state it is in (a gather at the end of a cancel)."""
        self.rec.set_state(self.rec.last_state or RunState.RUNNING, text)

    def _resume_from(self) -> tuple[Endpoint, str] | None:
        """The checkpoint a resume onto another node 0 copies there first (the launch options say which)."""
        found = read_options(self.dir).resume_from
        if found is None:
            return None
        self.resume_source = backend_for(load_plan(run_dir(self.home, found.run)))
        node = found.node
        files = here_checkpoint_files() if node is None else self.resume_source.checkpoint_files(node)
        return Endpoint(files, found.root), found.name

    def secrets(self) -> dict[str, str]:
        try:
            return SecretStore(self.home).resolve(self.plan.workload.secrets)
        except MissingSecrets as err:
            raise LaunchFailed(str(err)) from None

    async def run(self) -> Outcome:
        self.loop = asyncio.get_running_loop()
        self.rec.write(self.store.set_launcher, self.run_id, os.getpid())
        syncing = asyncio.create_task(self._sync_loop())
        try:
            outcome = await self.policy.run(adopted=self.adopted, restart=self.restart)
        except LaunchFailed as err:
            outcome = await self.policy._fail(str(err))
        except Exception as err:  # noqa: BLE001 - an owner's bug must still end the run and say where to look
            outcome = await self.policy._fail(self._bug(err))
        finally:
            syncing.cancel()
        self.recovery.close(outcome.state == RunState.SUCCEEDED)
        if self.idle.stopping and outcome.state == RunState.CANCELLED and not outcome.triage:
            outcome = dataclasses.replace(outcome, triage=TriageReport(signature="idle", said=self.idle.flagged or ""))
        await self._finish(outcome)
        await self._write_the_rest(outcome)
        return outcome

    def _bug(self, err: Exception) -> str:
        """The words for an owner's own failure; the traceback goes to a file if the disk takes it."""
        details = self.dir / "supervisor-error.txt"
        try:
            details.write_text(traceback.format_exc())
            where = f"details in {details}"
        except OSError as write_err:
            where = f"the details could not be written to {details}: {write_err.strerror}"
            _say(traceback.format_exc())
        return f"the run's supervisor failed: {type(err).__name__}: {err} ({where})"

    async def _write_the_rest(self, outcome: Outcome) -> None:
        """The records the disk refused, written once it takes them; until then this owner holds the run
        (nobody else adopts it and loses the cause) and its lock says why it waits, with the run's end
        (its usage stops there). After :func:`end_wait_s` it gives up and says so in the same place: the
        next command that finds room gives the run a new owner, which records its end."""
        said = False
        end = KeptEnd(outcome.state.value, self.policy.ended_at or self.finished_at, outcome.exit_code)
        deadline = time.monotonic() + end_wait_s()
        while not self.rec.flush_unwritten():
            if not said:
                self.lock_note(f"waiting for room: {self.rec.write_error}", end)
                _say(f"waiting to write the run's end: {self.rec.write_error}")
                said = True
            if time.monotonic() >= deadline:
                waited = f"{end_wait_s() / 60:.0f} min" if end_wait_s() >= 60 else f"{end_wait_s():.0f} s"
                self.lock_note(f"gave up waiting for room after {waited}: {self.rec.write_error}",
                               dataclasses.replace(end, gave_up=True))
                _say(f"gave up writing the run's end after {waited}: {self.rec.write_error}")
                return
            await asyncio.sleep(FLUSH_RETRY_S)
        if said:
            self.lock_note("")

    async def _notify(self, event: str, ckpt=None) -> None:
        """Tell the user (``notify:`` and the user settings); what happens is recorded, never raised. A
        probe (``doctor --estimate``) tells nobody: it is cancelled on purpose."""
        if read_options(self.dir).tagged(PROBE_TAG):
            return
        if not notify_wanted(self.plan.workload.notify, event):
            return
        try:
            if ckpt is None:
                ckpt = await newest_of_run(self.home, self.run_id)
            await asyncio.to_thread(notify_run, self.home, self.run_id, self.plan.workload.notify, event, ckpt)
        except Exception:  # noqa: BLE001 - a notification never changes the run
            print(f"notification failed:\n{traceback.format_exc()}", flush=True)

    async def _watch_idle(self) -> None:
        """``metrics.idle_policy``: say a run's GPUs sit idle, tell the user, stop it when asked to."""
        record = self.store.get_run(self.run_id)
        verdict = self.idle.check(record.summary.state if record else RunState.RUNNING)
        if verdict.flag:
            self.rec.set_state(RunState.RUNNING, verdict.flag)
            if verdict.flag.startswith("idle"):
                await self._notify("idle")
        if verdict.stop:
            request_cancel(self.home, self.run_id)

    async def _sync_loop(self) -> None:
        while True:
            self.tracking.round()
            stall = (self.policy.stalls.stalled or "").partition("; ")[0]  # the stall, not what was learnt of it since
            if stall and stall != self.stall_told:
                self.stall_told = stall
                await self._notify("stalled")
            await self._watch_idle()
            await asyncio.sleep(SYNC_EVERY_S)

    async def _finish(self, outcome: Outcome) -> None:
        self.backend = self.policy.backend  # the nodes it ended on (a swap replaces them)
        self.rec.write(save_plan, self.dir, self.backend.plan)
        # The run's end is recorded when its job ends, whatever tracking does; MLflow gets it after.
        self.tracking.ended = True
        self.finished_at = time.time()
        ended_at = self.policy.ended_at or self.finished_at
        record = self.store.get_run(self.run_id)
        if record is not None:
            try:  # the real figure beside the launch's estimate, for later ones: kept before the end is told
                settle(self.dir, record, state=outcome.state.value, ended_at=ended_at)
            except OSError:
                pass
        self.rec.finished(outcome.state, outcome.exit_code, outcome.triage, at=ended_at,
                          detail=self._succeeded_how(outcome))
        tracked = self.tracking.send_end(outcome.state)
        for left in await self.keeper.finish(self.backend):
            _say(left)
        ckpt = await newest_of_run(self.home, self.run_id)
        if ckpt is not None:
            try:
                save_safe_step(self.dir, ckpt, time.time())
            except OSError:
                pass  # a full disk: `show` asks the nodes for the newest checkpoint instead
        if self.swap_told is not None:
            await asyncio.gather(self.swap_told, return_exceptions=True)  # told in the order it happened
        await self._notify(outcome.state.value, ckpt)
        if tracked is not None:
            await self.tracking.wait_end(tracked)
        self.rec.write(self.store.set_launcher, self.run_id, None)
        await self.keeper.close()
        if self.resume_source is not None:
            await self.resume_source.close()
        await self.backend.close()

    def _succeeded_how(self, outcome: Outcome) -> str:
        """A succeeded run's words: that it trained nothing (never a bare "succeeded"), or the run it
        continued; empty for another end, or a run that continued none."""
        if outcome.state != RunState.SUCCEEDED or not self.plan.uses_builtin_trainer:
            return ""
        if not self.rec.trained():
            return trained_nothing(self.dir, max_steps_of(self.plan))
        found = recorded(self.dir)
        return found.said() if found is not None else ""


def _say(text: str) -> None:
    """A line in the owner's log (its stdout), unless the disk refuses it: the run matters more."""
    try:
        print(text, flush=True)
    except OSError:
        pass


def _cannot_adopt(home: Path, record, err: Exception) -> None:
    """A live run whose plan was never recorded (an older fsdp-tui's): end it, saying what to do."""
    store = RunStore(home)
    rec = Recorder(store, record.summary.run_id, {n.node_rank: n.host for n in record.nodes}, parse_logs=None)
    rec.attempt = record.summary.attempt
    why = (f"nothing supervises this run and it cannot be adopted: its plan is not recorded ({err}); "
           "if its job still runs on the nodes, stop it there")
    rec.finished(RunState.FAILED, None, TriageReport(said=why))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.runs.owner.supervisor")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("run_id")
    parser.add_argument("--adopt", action="store_true")
    parser.add_argument("--lock-fd", type=int, help="the run's lock, taken by whoever started this process")
    args = parser.parse_args(argv)
    private_files()
    directory = run_dir(args.home, args.run_id)
    if args.lock_fd is not None:
        lock = OwnerLock.inherited(directory, args.lock_fd)
    else:
        lock = OwnerLock(directory)
        if not lock.acquire():
            return 0  # another process owns it: nothing to do
    try:
        record = RunStore(args.home).get_run(args.run_id)
    except (StoreDamaged, sqlite3.OperationalError) as err:
        why = f"cannot read the run store: {err}"
        lock.note(f"cannot start: {why}")
        _say(f"owner of {args.run_id}: {why}")
        return 1
    if record is None or record.summary.state.is_final:
        return 0
    try:
        plan = load_plan(directory)
    except (OSError, ValueError, KeyError) as err:
        _cannot_adopt(args.home, record, err)
        return 1
    restart = args.adopt and record.summary.state == RunState.RETRYING
    supervisor = Supervisor(args.home, args.run_id, plan, adopted=args.adopt and not restart, restart=restart)
    supervisor.lock_note = lock.note
    _say(f"owner of {args.run_id}: pid {os.getpid()}{' (adopted)' if args.adopt else ''}")
    asyncio.run(supervisor.run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
