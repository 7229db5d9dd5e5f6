"""What the app and the CLI ask of sweeps: start one (its driver starts detached) and cancel one."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

from launcher.runs.core.store import RunStore
from launcher.runs.launch import cancel_run
from launcher.runs.sweeps.driver import driver_alive, plan_path, spawn_driver
from launcher.runs.sweeps.record import (
    SweepRecord,
    VariantRecord,
    load_sweep,
    new_sweep_id,
    request_cancel,
    save_sweep,
)
from launcher.workload.plan import plan_to_json
from launcher.workload.sweep import SweepPlan


def create_sweep(plan: SweepPlan, home: Path) -> SweepRecord:
    """The sweep's record and each variant's plan (run ids fixed now), before the driver starts."""
    experiment = plan.base.plan.workload.experiment_name
    sweep_id = new_sweep_id(experiment)
    variants = [VariantRecord(v.index, v.label, v.values, v.overrides, v.plan.run_id) for v in plan.variants]
    record = SweepRecord(sweep_id, experiment, str(plan.file.resolve()), list(plan.sets), plan.spec.parallel,
                         plan.spec.on_failure, variants)
    save_sweep(home, record)
    for v in plan.variants:
        plan_path(home, sweep_id, v.index).write_text(json.dumps(plan_to_json(v.plan)))
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
    return record
