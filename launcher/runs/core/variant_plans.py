"""A sweep's variant plans (``variant-<i>.plan.json`` in the sweep's folder): each variant's plan, its run id
fixed, written when the sweep is created (and again when a resumed variant gets a new run) and read by the
sweep's driver as it starts the variant. The plan's JSON as a run's own plan file holds it
(:func:`~launcher.runs.core.layout.save_plan`), without the shape: the variant's run records its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.runs.core.layout import read_json, write_whole

if TYPE_CHECKING:
    from launcher.workload.plan import RunPlan


def save_variant_plan(path: Path, plan: RunPlan) -> None:
    from launcher.workload.plan import plan_to_json

    write_whole(path, json.dumps(plan_to_json(plan)))


def read_variant_plan(path: Path, run_id: str | None = None) -> RunPlan:
    """The variant's plan, rebuilt and validated; under ``run_id`` when given (a resumed variant's new run,
    whose node folders are its own). ``ValueError``/``KeyError``: none there, or no longer a plan."""
    from launcher.workload.plan import plan_from_json

    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: no variant plan there (missing, or not JSON)")
    return plan_from_json({**data, "run_id": run_id} if run_id else data)
