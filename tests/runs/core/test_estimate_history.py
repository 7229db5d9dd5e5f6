"""Estimates from the run store (a real SQLite store and run folders, no job): which past runs are the
same workload, which measurement is used, which ratios correct it, and what a run keeps at its end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.events import RunState
from launcher.runs.core.estimates import (
    PROBE_TAG,
    estimate_lines,
    estimate_plan,
    history,
    keep_estimate,
    settle,
)
from launcher.runs.core.store import RunStore
from launcher.runs.launch import create_run
from launcher.workload.model import Workload
from launcher.workload.plan import build_plan
from trainer.wire.protocol import MetricRecord

BASE = {"experiment_name": "est", "compute": {"accelerator_type": "CPU", "procs_per_node": 2},
        "parameters": {"model_name": "builtin:tiny-llama", "dataset_name": "builtin:tiny-alpaca", "output_dir": "o",
                       "max_steps": 50, "per_device_batch_size": 8}}


def _plan(run_id: str, **params):
    workload = Workload.model_validate({**BASE, "parameters": {**BASE["parameters"], **params}})
    return build_plan(workload, run_id=run_id)


def _past(home: Path, run_id: str, *, step_s: float, steps: int = 10, state=RunState.SUCCEEDED, probe=False,
          ratio: tuple[str, float] | None = None, **params) -> None:
    """A finished run in the store: 10 s of start-up, then ``steps`` steps of ``step_s`` each, 3 s of end."""
    plan = _plan(run_id, **params)
    directory = create_run(plan, home)
    store = RunStore(home)
    t0 = store.get_run(run_id).transitions[0][0]
    times = [t0 + 10 + i * step_s for i in range(steps)]
    (directory / "metrics.jsonl").write_text("".join(
        MetricRecord(step=i + 1, kind="train", max_steps=plan.workload.parameters.get("max_steps") or 40,
                     time=t).to_json() + "\n" for i, t in enumerate(times)))
    if probe:
        (directory / "options.json").write_text(json.dumps({"force": False, "tags": {PROBE_TAG: "1"}}))
    if ratio is not None:
        (directory / "estimate.json").write_text(json.dumps({"estimate": {"source": f"{ratio[0]} x"},
                                                             "real": {"ratio": ratio[1]}}))
    store.record_metric_summary(run_id, step=steps)
    store.set_state(run_id, state, 1, "", at=times[-1] + 3)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_TUI_HOME", str(tmp_path))  # the settings (prices) live there too
    return tmp_path


def test_the_newest_run_of_the_same_workload_is_the_measurement(home):
    _past(home, "a-old", step_s=2.0)
    _past(home, "b-other-batch", step_s=9.0, per_device_batch_size=4)  # another workload: another pace
    _past(home, "c-new", step_s=1.0, max_steps=500, output_dir="elsewhere")  # same pace, other length
    past = history(home, _plan("x").workload.model_dump(mode="json"))
    assert past.timing.run_id == "c-new" and past.timing.loop_s_per_step == pytest.approx(1.0)
    assert past.end_tail_s == pytest.approx(3.0) and past.ratios == ()
    est = estimate_plan(home, _plan("x", max_steps=100))
    assert est.steps == 100 and est.source.startswith("run c-new")
    assert est.wall_s == pytest.approx(10 + 99 * 1.0 + 3.0)  # start-up (step 1 included), 99 more, the end
    assert est.unit == "CPU" and est.hours == pytest.approx(2 * est.wall_s / 3600) and est.cost is None


def test_a_probe_measures_the_steps_and_the_last_finished_run_the_end(home):
    _past(home, "a-run", step_s=2.0)
    _past(home, "b-probe", step_s=1.5, state=RunState.CANCELLED, probe=True)
    est = estimate_plan(home, _plan("x"))
    assert est.source.startswith("probe b-probe") and est.tail_s == pytest.approx(3.0) and est.unmeasured == ()
    assert est.wall_s == pytest.approx(10 + 49 * 1.5 + 3.0)


def test_ratios_correct_only_estimates_from_their_own_kind_of_measurement(home):
    _past(home, "a", step_s=1.0, ratio=("probe", 1.5))
    _past(home, "b", step_s=1.0, ratio=("run", 1.1))
    _past(home, "c", step_s=1.0, ratio=("run", 1.3))
    from_run = estimate_plan(home, _plan("x"))
    assert from_run.correction == pytest.approx(1.2) and from_run.corrected_by == 2
    _past(home, "d-probe", step_s=1.0, state=RunState.CANCELLED, probe=True)
    from_probe = estimate_plan(home, _plan("x"))
    assert from_probe.source.startswith("probe") and from_probe.correction == pytest.approx(1.5)


def test_prices_from_the_settings_price_the_estimate(home):
    (home / "settings.json").write_text(json.dumps({"prices": {"currency": "EUR", "cpu_hour": 0.4}}))
    _past(home, "a", step_s=1.0)
    est = estimate_plan(home, _plan("x"))
    assert est.currency == "EUR" and est.cost == pytest.approx(est.hours * 0.4)


def test_nothing_measured_says_how_to_measure(home):
    _past(home, "a-running", step_s=1.0, state=RunState.RUNNING)  # not ended: not history yet
    [line] = estimate_lines(home, _plan("x"), "w.yaml")
    assert "nothing measured yet" in line and "fsdp-tui doctor w.yaml --estimate" in line


def test_a_run_keeps_its_estimate_and_its_real_figure_at_the_end(home):
    _past(home, "a", step_s=1.0)
    est = estimate_plan(home, _plan("x", max_steps=10))
    _past(home, "b", step_s=1.0)
    store = RunStore(home)
    record = store.get_run("b")
    keep_estimate(record.directory, est)
    real = settle(record.directory, record)
    kept = json.loads((record.directory / "estimate.json").read_text())
    assert kept["real"] == real.to_dict() and real.steps_done == 10 and real.succeeded
    assert real.real_wall_s == pytest.approx(record.summary.ended_at - record.transitions[0][0])
    assert real.ratio == pytest.approx(real.real_wall_s / est.wall_s)
    _past(home, "c-failed", step_s=1.0, steps=4, state=RunState.FAILED)
    record = store.get_run("c-failed")
    keep_estimate(record.directory, est)
    assert settle(record.directory, record).ratio is None  # a run cut short teaches nothing
    record = store.get_run("a")
    assert settle(record.directory, record) is None  # launched without an estimate
