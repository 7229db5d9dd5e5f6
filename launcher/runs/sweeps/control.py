"""What the app and the CLI ask of sweeps: start one (its driver starts detached), adopt the ones whose
driver died, cancel one, resume an ended one."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from launcher.paths import new_run_id
from launcher.runs.core.store import RunStore
from launcher.runs.core.variant_plans import read_variant_plan, save_variant_plan
from launcher.runs.launch import cancel_run
from launcher.runs.sweeps.driver import Driver, driver_alive, plan_path, spawn_driver
from launcher.runs.sweeps.record import (
    CANCEL,
    SweepRecord,
    VariantRecord,
    list_sweeps,
    load_sweep,
    new_sweep_id,
    request_cancel,
    save_sweep,
    sweep_dir,
)
from launcher.words import plural
from launcher.workload.sweep import SweepPlan

STARTING_S = 10.0
"""A sweep created this recently whose driver holds no lock yet is still starting it: not adopted."""


def create_sweep(plan: SweepPlan, home: Path) -> SweepRecord:
    """The sweep's record and each variant's plan (run ids fixed now), before the driver starts."""
    base = plan.base.plan if plan.base is not None else None
    if base is None:
        raise ValueError(f"{plan.file}: the sweep has problems to fix before it starts")
    experiment = base.workload.experiment_name
    sweep_id = new_sweep_id(experiment)
    variants = [VariantRecord(v.index, v.label, v.values, v.overrides, v.run_plan.run_id) for v in plan.variants]
    record = SweepRecord(sweep_id, experiment, str(plan.file.resolve()), list(plan.sets), plan.spec.parallel,
                         plan.spec.on_failure, variants)
    save_sweep(home, record)
    for v in plan.variants:
        save_variant_plan(plan_path(home, sweep_id, v.index), v.run_plan)
    return record


def start_sweep(plan: SweepPlan, home: Path, *, parallel: int | None = None) -> str:
    """Record the sweep and start its driver, detached: the sweep outlives this process."""
    if not plan.ok:
        raise ValueError("the sweep has problems: fix them first (fsdp-tui sweep FILE --dry-run)")
    if parallel is not None:
        plan = replace(plan, spec=plan.spec.model_copy(update={"parallel": parallel}))
    record = create_sweep(plan, home)
    spawn_driver(home, record.sweep_id)
    return record.sweep_id


def adopt_sweeps(home: Path, sweep_ids: list[str] | None = None) -> list[str]:
    """Every sweep not ended whose driver is gone gets a new one (exactly one: the lock decides), which
    follows the variants already started and starts the rest; what ``sweeps``, ``sweep show``, the sweep
    view and a sweep's watch call before showing it. Returns the sweeps adopted."""
    records = list_sweeps(home) if sweep_ids is None else [load_sweep(home, i) for i in sweep_ids]
    adopted = []
    for record in records:
        if record.is_final or driver_alive(home, record.sweep_id):
            continue
        if record.started_at is None and time.time() - record.created_at < STARTING_S:
            continue
        if spawn_driver(home, record.sweep_id) is not None:
            adopted.append(record.sweep_id)
    return adopted


def resume_sweep(home: Path, sweep_id: str) -> SweepRecord:
    """An ended sweep (cancelled or failed) goes on: every variant that has not succeeded runs again as a
    new run (its earlier run stays, named in the variant's detail); the sweep's MLflow parent run is the
    same. ``ValueError`` says why not."""
    record = load_sweep(home, sweep_id)
    if not record.is_final:
        raise ValueError(f"sweep {sweep_id} is {record.state}: it is not over (fsdp-tui sweep show {sweep_id})")
    again = [v for v in record.variants if v.state != "succeeded"]
    if not again:
        raise ValueError(f"sweep {sweep_id}: every variant succeeded, nothing to resume")
    for v in again:
        run_id = new_run_id(record.experiment)
        path = plan_path(home, sweep_id, v.index)
        save_variant_plan(path, read_variant_plan(path, run_id))
        record = record.with_variant(v.index, run_id=run_id, state="pending",
                                     detail=f"resumed; earlier: {v.run_id} {v.state}")
    (sweep_dir(home, sweep_id) / CANCEL).unlink(missing_ok=True)
    record = replace(record, state="pending", ended_at=None, driver_pid=None,
                     detail=f"resumed: {len(again)} of {plural(len(record.variants), 'variant')} run again")
    save_sweep(home, record)
    spawn_driver(home, sweep_id)
    return record


async def cancel_sweep(home: Path, sweep_id: str, *, timeout_s: float = 180.0) -> SweepRecord:
    """Ask the driver to cancel (live variants cancelled, the rest skipped) and wait for the end. A sweep
    whose driver is gone is ended here: its live runs cancelled, its pending variants skipped."""
    record = load_sweep(home, sweep_id)
    if record.is_final:
        return record
    request_cancel(home, sweep_id)
    asked = time.monotonic()
    while time.monotonic() < asked + timeout_s:
        record = load_sweep(home, sweep_id)
        if record.is_final:
            return record
        if not driver_alive(home, sweep_id) and (record.started_at is not None or time.monotonic() > asked + 10):
            return await _end_orphan(home, load_sweep(home, sweep_id))
        await asyncio.sleep(0.2)
    return load_sweep(home, sweep_id)


async def _end_orphan(home: Path, record: SweepRecord) -> SweepRecord:
    store = RunStore(home)
    live = [v for v in record.variants if v.state in ("pending", "running")]
    await asyncio.gather(*(cancel_run(home, v.run_id) for v in live if store.get_run(v.run_id) is not None))
    for v in live:
        run = store.get_run(v.run_id)
        state = run.summary.state.value if run is not None else "skipped"
        record = record.with_variant(v.index, state=state, detail="" if run else "the sweep was cancelled")
    record = replace(record, state="cancelled", ended_at=time.time())
    save_sweep(home, record)
    if record.mlflow_parent:
        await asyncio.to_thread(Driver(home, record.sweep_id)._close_parent, record.mlflow_parent, "KILLED")
        record = load_sweep(home, record.sweep_id)
    return record
