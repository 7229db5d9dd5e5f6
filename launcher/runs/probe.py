"""A probe: the workload's first steps on its real nodes, then cancelled, to measure its pace before
the run (``fsdp-tui doctor FILE --estimate``).

The probe is an ordinary run of the workload (its own owner, its record in the store, tagged as a
probe), started as it would be launched, so its start-up is the real one: shipping, environment, model
and data. It is cancelled once it has made enough steps or its time budget is spent. The built-in
trainer saves and exports nothing in a probe and never resumes (a probe's checkpoint must never become
the run's); no MLflow run is logged and no notification sent for it. Its timing then serves every later
estimate of the workload, as any run's does."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.paths import new_run_id, run_dir
from launcher.runs.core.estimate import Estimate, Timing
from launcher.runs.core.estimates import PROBE_TAG, estimate_plan, run_timing
from launcher.runs.core.layout import LOG_METRICS, METRICS, read_records
from launcher.runs.core.store import RunStore
from launcher.runs.launch import cancel_run, start_run
from launcher.words import plural
from launcher.workload.plan import RunPlan, build_plan

PROBE_STEPS = 20
"""Steps a probe makes after its first one (enough for a spread of step times)."""
PROBE_BUDGET_S = 600.0
POLL_S = 0.5


@dataclass(frozen=True)
class ProbeResult:
    run_id: str
    steps: int
    """Train records the probe saw."""
    elapsed_s: float
    state: str
    timing: Timing | None
    estimate: Estimate | None
    why: str = ""
    """Why there is no estimate, when there is none."""


def probe_plan(plan: RunPlan) -> RunPlan:
    """``plan`` as a probe runs it: no MLflow run; for the built-in trainer no checkpoint, export or resume."""
    w = plan.workload
    update: dict = {"mlflow": w.mlflow.model_copy(update={"enabled": False}), "max_retries": 0,
                    "idempotency_token": None}
    if w.uses_builtin_trainer:
        params = dict(w.parameters)
        params["checkpoint"] = {**(params.get("checkpoint") or {}), "every_steps": None, "save_final": False,
                                "export_hf": False, "resume": "never"}
        update["parameters"] = params
    workload = w.model_copy(update=update)
    return build_plan(workload, run_id=new_run_id(f"{w.experiment_name}-probe"), source_file=plan.source_file,
                      node_root=plan.node_root)


def _train_steps(directory: Path) -> list[int]:
    records = read_records(directory / METRICS) or read_records(directory / LOG_METRICS)
    return [r.step for r in records if r.kind == "train"]


async def run_probe(home: Path, plan: RunPlan, *, steps: int = PROBE_STEPS, budget_s: float = PROBE_BUDGET_S,
                    force: bool = False, on_progress=None) -> ProbeResult:
    """Launch the probe, wait for ``steps`` steps past its first (or ``budget_s``), cancel it, estimate."""
    probe = probe_plan(plan)
    started = time.monotonic()
    run_id = start_run(probe, home, force=force, tags={PROBE_TAG: "1"}, idempotent=False)
    directory = run_dir(home, run_id)
    store = RunStore(home)
    seen: list[int] = []
    ended = False
    while time.monotonic() - started < budget_s:
        seen = _train_steps(directory)
        record = store.get_run(run_id)
        if record is not None and record.summary.state.is_final:
            ended = True
            break
        if seen and seen[-1] - seen[0] >= steps:
            break
        if on_progress is not None:
            on_progress(len(seen), time.monotonic() - started)
        await asyncio.sleep(POLL_S)
    if not ended:
        await cancel_run(home, run_id)
    record = store.get_run(run_id)
    seen = _train_steps(directory)
    elapsed = time.monotonic() - started
    state = record.summary.state.value if record else "unknown"
    timing = run_timing(record) if record is not None else None
    if timing is None:
        why = (f"the probe made {plural(len(seen), 'step')} in {elapsed:.0f} s ({state}"
               + (f": {record.summary.detail}" if record is not None and record.summary.detail else "")
               + "): too few to time; give it a larger budget (--probe-budget) or see `fsdp-tui show "
               + f"{run_id}`")
        return ProbeResult(run_id, len(seen), elapsed, state, None, None, why)
    est = estimate_plan(home, plan)
    why = "" if est is not None else ("the number of steps is unknown: set parameters.max_steps, or launch it "
                                      "once to learn its total")
    return ProbeResult(run_id, len(seen), elapsed, state, timing, est, why)
