"""A sweep's driver: a detached process that starts its variants as ordinary runs (each with its own
supervisor, through the same :func:`start_run` as ``fsdp-tui run``), ``parallel`` at a time, follows
them in the run store, and ends the sweep. It holds ``driver.lock`` while it lives; it alone writes
the sweep's record. Cancel: a ``cancel`` file, which it reads before every start.

    python -m launcher.runs.sweeps.driver --home HOME SWEEP_ID
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.events import RunState
from launcher.paths import private_files
from launcher.runs.core.continuing import lineage_runs, with_lineage
from launcher.runs.core.ownership import ROOT, adopt_orphans
from launcher.runs.core.store import RunStore
from launcher.runs.core.variant_plans import read_variant_plan
from launcher.runs.launch import cancel_run, start_run
from launcher.runs.launch_checks import continuation_of
from launcher.runs.sweeps.record import (
    LOCK,
    PARENT_TAG,
    SWEEP_PARENT_TAG,
    SWEEP_TAG,
    cancel_requested,
    load_sweep,
    save_sweep,
    sweep_dir,
)
from launcher.words import plural
from launcher.workload.plan import RunPlan

if TYPE_CHECKING:
    from launcher.runs.owner.mlflow_sink import MlflowSink
    from launcher.runs.owner.tracking import Status

POLL_S = 0.5
SETTLE_S = 3.0
ADOPT_EVERY = 20
LOG = "driver.log"


def plan_path(home: Path, sweep_id: str, index: int) -> Path:
    return sweep_dir(home, sweep_id) / f"variant-{index}.plan.json"


def driver_alive(home: Path, sweep_id: str) -> bool:
    path = sweep_dir(home, sweep_id) / LOCK
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def spawn_driver(home: Path, sweep_id: str) -> int | None:
    """Take the sweep's lock and start its driver holding it, in its own session, output to the sweep's
    ``driver.log``; ``None`` when a driver holds the lock already (of two callers at once, one starts it)."""
    fd = os.open(sweep_dir(home, sweep_id) / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        env = {k: v for k, v in os.environ.items() if k not in ("FSDP_TUI_RUN_ID", "NODE_RANK")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "launcher.runs.sweeps.driver", "--home", str(home), "--lock-fd", str(fd),
                sweep_id]
        with open(sweep_dir(home, sweep_id) / LOG, "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                    env=env, pass_fds=(fd,))
        _STARTED.append(proc)
        _STARTED[:] = [p for p in _STARTED if p.poll() is None]
        return proc.pid
    finally:
        os.close(fd)  # the driver's descriptor keeps the lock


_STARTED: list[subprocess.Popen] = []
"""Drivers this process started: waited for once they end (no zombies while it lives on)."""


class Driver:
    def __init__(self, home: Path, sweep_id: str) -> None:
        self.home, self.sweep_id = Path(home), sweep_id
        self.store = RunStore(self.home)
        self.record = load_sweep(self.home, sweep_id)

    def save(self, **changes) -> None:
        from dataclasses import replace

        self.record = replace(self.record, **changes)
        save_sweep(self.home, self.record)

    def set_variant(self, index: int, **changes) -> None:
        self.record = self.record.with_variant(index, **changes)
        save_sweep(self.home, self.record)

    async def run(self) -> str:
        """The sweep to its end. A driver that takes over from a dead one (or resumes an ended sweep) goes
        on from the record: variants recorded running, or whose run exists already, are followed, not
        started again; the MLflow parent run is the same one."""
        self.save(state="cancelling" if self.record.state == "cancelling" else "running",
                  started_at=self.record.started_at or time.time(), driver_pid=os.getpid())
        parent = self.record.mlflow_parent or await asyncio.to_thread(self._open_parent)
        if parent and parent != self.record.mlflow_parent:
            self.save(mlflow_parent=parent)
        live: dict[int, str] = {}
        for v in self.record.variants:
            if v.state == "running" or (v.state == "pending" and self.store.get_run(v.run_id) is not None):
                live[v.index] = v.run_id
                if v.state == "pending":
                    self.set_variant(v.index, state="running")
        if live:
            adopt_orphans(self.home, [r for r in live.values() if r in set(self.store.active_runs())])
        stopping = ""
        rounds = 0
        while True:
            if cancel_requested(self.home, self.sweep_id) and stopping != "cancel":
                stopping = "cancel"
                self.save(state="cancelling")
                await asyncio.gather(*(cancel_run(self.home, run_id) for run_id in live.values()))
            for index, run_id in list(live.items()):
                record = self.store.get_run(run_id)
                if record is not None and record.summary.state.is_final:
                    del live[index]
                    state = record.summary.state
                    self.set_variant(index, state=state.value, detail=record.summary.detail)
                    if state != RunState.SUCCEEDED and self.record.on_failure == "stop" and not stopping:
                        stopping = "stop"
            pending = [v for v in self.record.variants if v.state == "pending"]
            if stopping and pending:
                why = "the sweep was cancelled" if stopping == "cancel" else "a variant failed (on_failure: stop)"
                for v in pending:
                    self.set_variant(v.index, state="skipped", detail=why)
                pending = []
            while (pending and len(live) < self.record.parallel and not cancel_requested(self.home, self.sweep_id)
                   and all(self._settled(run_id) for run_id in live.values())):
                v = pending.pop(0)
                live[v.index] = await self._start(v.index, v.run_id, parent)
            if not live and not pending:
                break
            rounds += 1
            if rounds % ADOPT_EVERY == 0:
                active = set(self.store.active_runs())
                # A live variant whose owner died gets a new one (as ``fsdp-tui runs`` would give it).
                adopt_orphans(self.home, [r for r in live.values() if r in active])
            await asyncio.sleep(POLL_S)
        return self._end(parent, stopping)

    def _settled(self, run_id: str) -> bool:
        """Whether a variant has been running a while (or ended): parallel variants start one after the
        other, so each takes its rendezvous port before the next one looks for a free one."""
        record = self.store.get_run(run_id)
        if record is None:
            return False
        if record.summary.state.is_final:
            return True
        running = [at for at, state, _a, _d in record.transitions if state == RunState.RUNNING]
        return bool(running) and time.time() - running[0] >= SETTLE_S

    def _plan(self, index: int) -> RunPlan:
        return read_variant_plan(plan_path(self.home, self.sweep_id, index))

    async def _start(self, index: int, run_id: str, parent: str | None) -> str:
        plan = await asyncio.to_thread(self._plan, index)
        tags = {SWEEP_TAG: self.sweep_id, "fsdp_tui.variant": self.record.variants[index - 1].label}
        if parent:
            tags[PARENT_TAG] = parent
        # Variants that share a fixed output_dir on purpose (sweep.share_output_dir) continue each other:
        # said and recorded as any launch's, refused when nothing would be left to train.
        continues = await continuation_of(plan)
        if continues is not None and continues.nothing_left:
            self.set_variant(index, state="failed", detail=f"not started: {continues.refusal(plan.output_dir or '')}")
            return run_id
        if continues is not None:
            plan = with_lineage(plan, lineage_runs(self.home, continues.run_id))
        try:
            start_run(plan, self.home, tags=tags, continues=continues)
        except (RuntimeError, OSError) as err:
            self.set_variant(index, state="failed", detail=f"could not start: {err}")
            return run_id
        self.set_variant(index, state="running")
        return run_id

    def _end(self, parent: str | None, stopping: str) -> str:
        states = [v.state for v in self.record.variants]
        if stopping == "cancel":
            state = "cancelled"
        elif all(s == "succeeded" for s in states):
            state = "succeeded"
        else:
            state = "failed"
        done = sum(s == "succeeded" for s in states)
        self.save(state=state, ended_at=time.time(), detail=f"{done}/{plural(len(states), 'variant')} succeeded")
        if parent:
            ends: dict[str, Status] = {"succeeded": "FINISHED", "failed": "FAILED"}
            self._close_parent(parent, ends.get(state, "KILLED"))
        return state

    def _mlflow(self) -> MlflowSink | None:
        from launcher.runs.owner.mlflow_sink import MlflowSink

        plan = read_variant_plan(plan_path(self.home, self.sweep_id, 1))
        cfg = plan.workload.mlflow
        if not cfg.enabled:
            return None
        return MlflowSink(cfg.tracking_uri, cfg.experiment or plan.workload.experiment_name, self.sweep_id, self.home)

    def _open_parent(self) -> str | None:
        """The sweep's MLflow run, parent of the variants' runs; a failure is noted, never fatal."""
        from launcher.runs.owner.tracking import writing

        try:
            sink = self._mlflow()
            if sink is None:
                return None
            with writing(self.home, sink):
                return sink.start({"sweep": {"file": self.record.file, "variants": len(self.record.variants),
                                             "parallel": self.record.parallel}},
                                  {SWEEP_TAG: self.sweep_id, SWEEP_PARENT_TAG: self.sweep_id}, key=SWEEP_PARENT_TAG)
        except Exception as err:  # noqa: BLE001 - tracking is not the job
            self.save(detail=f"MLflow parent run not created: {type(err).__name__}: {err}")
            return None

    def _close_parent(self, parent: str, status: Status) -> None:
        from launcher.runs.owner.tracking import writing

        try:
            sink = self._mlflow()
            if sink is None:
                return  # the parent was opened by an earlier driver whose workload logged to MLflow
            with writing(self.home, sink):
                sink.reopen(parent)
                totals = children_totals(self.home, [v.run_id for v in self.record.variants])
                sink.finish(status, [sweep_dir(self.home, self.sweep_id) / "sweep.json"], totals)
        except Exception as err:  # noqa: BLE001 - tracking is not the job
            self.save(detail=f"{self.record.detail}; MLflow parent not closed: {type(err).__name__}: {err}")


def add_totals(each: list[dict[str, float]]) -> dict[str, float]:
    """The sweep's totals from its variants' (:func:`~launcher.runs.core.usage.usage_totals`): hours of
    each kind summed; the cost only when every variant that used any hours has a price (a sum that left
    some out would read as the whole)."""
    used = [t for t in each if t]
    out: dict[str, float] = {}
    for kind in ("gpu_hours", "cpu_hours"):
        if any(kind in t for t in used):
            out[kind] = sum(t.get(kind, 0.0) for t in used)
    if used and all("cost" in t for t in used):
        out["cost"] = sum(t["cost"] for t in used)
    return out


def children_totals(home: Path, run_ids: list[str]) -> dict[str, float]:
    """What the sweep's parent MLflow run gets as it ends: its variants' usage summed (variants that never
    started count nothing)."""
    from launcher.runs.core.usage import usage_totals

    return add_totals([usage_totals(home, run_id) for run_id in run_ids])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.runs.sweeps.driver")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("sweep_id")
    parser.add_argument("--lock-fd", type=int, help="the sweep's lock, taken by whoever started this process")
    args = parser.parse_args(argv)
    private_files()
    if args.lock_fd is None:
        fd = os.open(sweep_dir(args.home, args.sweep_id) / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"sweep {args.sweep_id} has a driver already", file=sys.stderr)
            return 1
    if load_sweep(args.home, args.sweep_id).is_final:
        return 0  # ended while this driver was being started
    print(f"driver of {args.sweep_id}: pid {os.getpid()}", flush=True)
    driver = Driver(args.home, args.sweep_id)
    try:
        state = asyncio.run(driver.run())
    except Exception as err:  # noqa: BLE001 - a driver's bug must still end the sweep and say where to look
        traceback.print_exc()
        driver.save(state="failed", ended_at=time.time(), detail=f"the sweep's driver failed: {err} "
                    f"(see {sweep_dir(args.home, args.sweep_id) / LOG})")
        return 1
    return 0 if state == "succeeded" else 1


if __name__ == "__main__":
    raise SystemExit(main())
