"""The estimate's arithmetic, table-driven: a timing from metrics records, steps to go, wall time with its
error bar, the correction by past runs, the fingerprint that says which runs are the same workload."""

from __future__ import annotations

import pytest

from launcher.runs.core.estimate import (
    Estimate,
    estimate,
    fingerprint,
    real_vs_estimate,
    steps_to_run,
    timing_of,
)
from trainer.wire.protocol import MetricRecord

T0 = 1000.0


def _records(step_times: list[float], *, start: float = 20.0, total: int = 100, evals: dict[int, float] | None = None):
    """Train records of steps 1..n, the i-th step taking step_times[i-1] (the first at ``start`` s), and
    eval records (step -> seconds) taken after that step."""
    out = [MetricRecord(step=0, kind="eval", time=T0 + start - 1, extra={"eval_seconds": 0.5})]
    now = T0 + start
    for i, dt in enumerate(step_times, start=1):
        now += dt if i > 1 else 0
        out.append(MetricRecord(step=i, kind="train", max_steps=total, time=now))
        if evals and i in evals:
            now += evals[i]
            out.append(MetricRecord(step=i, kind="eval", time=now, extra={"eval_seconds": evals[i]}))
    return out


def test_timing_of_a_finished_run():
    records = _records([0.0, 1.0, 1.0, 3.0, 1.0], evals={3: 2.0})
    t = timing_of("r1", records, created_at=T0, ended_at=T0 + 20 + 6 + 2 + 4, probe=False, finished=True)
    assert t is not None
    assert t.startup_s == pytest.approx(20.0)
    assert (t.first_step, t.last_step, t.total_steps) == (1, 5, 100)
    assert t.step_s == pytest.approx((1.0, 1.0, 3.0, 1.0))  # the evaluation after step 3 is taken out
    assert t.loop_s_per_step == pytest.approx(6.0 / 4)
    assert t.eval_s == pytest.approx(1.25)  # median of 0.5 (step 0) and 2.0
    assert t.tail_s == pytest.approx(4.0)


@pytest.mark.parametrize("steps, probe, finished, expect", [
    ([0.0, 1.0], False, True, None),           # two records: one step time, too few
    ([0.0, 1.0, 1.0], True, False, "probe"),   # a probe: no end measured
    ([0.0, 1.0, 1.0], False, False, "run"),    # a failed run still timed its steps
])
def test_timing_needs_steps_and_knows_its_kind(steps, probe, finished, expect):
    t = timing_of("r", _records(steps), T0, T0 + 99, probe=probe, finished=finished)
    if expect is None:
        assert t is None
        return
    assert t.probe == (expect == "probe")
    assert (t.tail_s is None) == (not finished)


@pytest.mark.parametrize("params, source_params, total, expect", [
    ({"max_steps": 50}, {}, 200, 50),                            # the run's own max_steps
    ({}, {}, 200, 200),                                          # epochs from the data, as the source saw them
    ({"num_epochs": 3}, {"num_epochs": 1}, 200, 600),            # more epochs, more steps
    ({"num_epochs": 1}, {"num_epochs": 2}, 200, 100),
    ({}, {"max_steps": 20}, 20, None),                           # the source's total was its own cap
])
def test_steps_to_run(params, source_params, total, expect):
    t = timing_of("r", _records([0.0, 1.0, 1.0], total=total), T0, None, probe=True, finished=False)
    assert steps_to_run(params, t, source_params) == expect


def test_estimate_adds_start_up_steps_evaluations_and_end_with_an_error_bar():
    t = timing_of("p1", _records([0.0] + [1.0] * 8 + [2.0]), T0, None, probe=True, finished=False)
    est = estimate(timing=t, steps=101, eval_every=25, end_tail_s=5.0, unit="GPU", workers=16, ratios=[],
                   price=2.0, currency="USD")
    loop = t.loop_s_per_step
    evals = 4 + 1  # at 25, 50, 75, 100, and the last one a probe did not reach
    assert est.evals == evals
    assert est.wall_s == pytest.approx(20.0 + 100 * loop + evals * 0.5 + 5.0)
    assert est.low_s <= est.wall_s <= est.high_s and est.high_s > est.low_s
    assert est.hours == pytest.approx(16 * est.wall_s / 3600)
    assert est.cost == pytest.approx(est.hours * 2.0)
    assert est.unmeasured == () and est.source.startswith("probe p1")
    text = "\n".join(est.lines())
    assert "GPU-hours, ~" in text and "USD" in text and "measured by probe p1 (steps 1-10)" in text


def test_a_probe_without_a_finished_run_says_its_end_is_not_measured():
    t = timing_of("p1", _records([0.0, 1.0, 1.0]), T0, None, probe=True, finished=False)
    est = estimate(timing=t, steps=10, eval_every=None, end_tail_s=None, unit="CPU", workers=2, ratios=[],
                   price=None, currency="")
    assert est.cost is None and est.unmeasured and "not measured" in "\n".join(est.lines())


def test_past_ratios_correct_the_estimate_and_only_complete_runs_teach():
    t = timing_of("r", _records([0.0, 1.0, 1.0]), T0, T0 + 30, probe=False, finished=True)
    plain = estimate(timing=t, steps=50, eval_every=None, end_tail_s=None, unit="CPU", workers=1, ratios=[],
                     price=None, currency="")
    fixed = estimate(timing=t, steps=50, eval_every=None, end_tail_s=None, unit="CPU", workers=1,
                     ratios=[1.5, 1.1, 1.2], price=None, currency="")
    assert fixed.wall_s == pytest.approx(plain.wall_s * 1.2) and fixed.corrected_by == 3
    assert "x1.20" in "\n".join(fixed.lines())
    kept = real_vs_estimate(fixed, fixed.wall_s / 1.2 * 1.3, steps_done=50, succeeded=True)
    assert kept.ratio == pytest.approx(1.3)  # against the uncorrected figure: ratios do not compound
    assert real_vs_estimate(fixed, 10.0, steps_done=20, succeeded=False).ratio is None
    assert real_vs_estimate(fixed, 10.0, steps_done=20, succeeded=True).ratio is None
    assert Estimate.from_dict(fixed.to_dict()) == fixed


BASE = {"experiment_name": "x", "compute": {"procs_per_node": 2},
        "parameters": {"model_name": "m", "per_device_batch_size": 8, "max_steps": 10, "output_dir": "o",
                       "checkpoint": {"every_steps": 5}}}


@pytest.mark.parametrize("change, same", [
    ({"parameters": {**BASE["parameters"], "max_steps": 500}}, True),
    ({"parameters": {**BASE["parameters"], "output_dir": "elsewhere"}}, True),
    ({"parameters": {**BASE["parameters"], "checkpoint": {"save_final": False}}}, True),
    ({"mlflow": {"enabled": False}, "max_retries": 3, "idempotency_token": "t"}, True),
    ({"parameters": {**BASE["parameters"], "per_device_batch_size": 4}}, False),
    ({"compute": {"procs_per_node": 4}}, False),
    ({"command": "python train.py"}, False),
])
def test_fingerprint_is_the_pace_not_the_length(change, same):
    assert (fingerprint({**BASE, **change}) == fingerprint(BASE)) is same
