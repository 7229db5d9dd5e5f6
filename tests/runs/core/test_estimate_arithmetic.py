"""The estimate's arithmetic, table-driven: a timing from metrics records, steps to go, wall time with its
error bar, the correction by past runs, the fingerprint that says which runs are the same workload."""

from __future__ import annotations

import pytest

from launcher.runs.core.estimate import (
    MAX_CORRECTION,
    Ended,
    Estimate,
    correction_of,
    estimate,
    fingerprint,
    pooled,
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
    kept = real_vs_estimate(fixed, fixed.wall_s / 1.2 * 1.3, Ended("succeeded", 1, 50))
    assert kept.ratio == pytest.approx(1.3)  # against the uncorrected figure: ratios do not compound
    assert kept.compared and kept.error == pytest.approx(1.3 / 1.2 - 1)
    assert real_vs_estimate(fixed, 10.0, Ended("failed", 1, 20)).ratio is None
    assert real_vs_estimate(fixed, 10.0, Ended("succeeded", 1, 20)).ratio is None
    assert Estimate.from_dict(fixed.to_dict()) == fixed


@pytest.mark.parametrize("ended, why", [
    (Ended("succeeded", 1, 300), None),
    (Ended("succeeded", 10, 300), None),                      # logged every 10 steps: still from the first
    (Ended("cancelled", 1, 149), "cancelled at step 149 of 300"),
    (Ended("cancelled", 1, 32), "cancelled at step 32 of 300"),
    (Ended("failed", None, None), "failed before its first step"),
    (Ended("succeeded", None, 300, start_step=300), "resumed from step 300 and trained nothing"),
    (Ended("succeeded", 151, 300, start_step=150), "resumed from step 150 and trained 150 steps"),
    (Ended("succeeded", None, None), "trained nothing"),
    (Ended("succeeded", 1, 120), "made 120 of the 300 steps estimated"),
    (Ended("cancelled", 1, 21, probe=True), "a probe"),
])
def test_only_a_run_that_is_what_was_estimated_is_compared(ended, why):
    t = timing_of("r", _records([0.0, 1.0, 1.0]), T0, T0 + 30, probe=False, finished=True)
    est = estimate(timing=t, steps=300, eval_every=None, end_tail_s=None, unit="CPU", workers=1, ratios=[1.1],
                   price=None, currency="")
    kept = real_vs_estimate(est, 80.0, ended)
    if why is None:
        assert kept.compared and kept.error is not None and kept.ratio is not None and kept.why is None
        return
    assert not kept.compared and kept.error is None and kept.ratio is None
    assert (kept.why or "").startswith(why)


@pytest.mark.parametrize("ratios, expect, held", [
    ([], None, False),
    ([1.1], None, False),                              # one or two runs: how they differed, not a bias
    ([1.1, 1.2], None, False),
    ([1.2, 1.25, 1.3], 1.25, False),                   # three that agree: the estimate errs one way
    ([1.2, 1.25, 1.3, 0.9, 1.22], 1.22, False),        # four of five agree
    ([1.0, 1.05, 0.95, 1.02, 9.0], None, False),       # they scatter around 1: an outlier moves nothing
    ([0.64, 0.77, 1.02, 1.34, 0.97], None, False),     # a loaded machine's runs: their own spread
    ([9.0, 8.0, 3.0], MAX_CORRECTION, True),           # each counted as x2 at most, the median held
    ([0.05, 0.4, 0.6], 1 / MAX_CORRECTION, True),
    ([1.1] * 5 + [30.0, 30.0], 1.1, False),            # only the last five count
])
def test_the_correction_needs_agreeing_ratios_and_is_bounded(ratios, expect, held):
    value, was_held = correction_of(ratios)
    assert (value is None) == (expect is None) and was_held is held
    if expect is not None:
        assert value == pytest.approx(expect)


def test_an_estimate_says_why_it_was_not_corrected():
    t = timing_of("r", _records([0.0, 1.0, 1.0]), T0, T0 + 30, probe=False, finished=True)
    for ratios, words in (([1.3], "1 past run compared with its estimates (too few to correct by)"),
                          ([0.7, 1.3, 1.0, 0.8, 1.2], "they scatter around 1")):
        est = estimate(timing=t, steps=50, eval_every=None, end_tail_s=None, unit="CPU", workers=1, ratios=ratios,
                       price=None, currency="")
        assert est.correction is None and words in "\n".join(est.lines())


def test_a_resumed_run_times_only_the_steps_it_made():
    """A run resumed after step 150 had step 151 in its start-up, not 151 steps: an estimate from it counts
    every other step of the new run as still to go."""
    from trainer.wire.protocol import ResumeCheck

    records = [ResumeCheck("verified", 151, from_step=150).record(),
               *[MetricRecord(step=150 + i, kind="train", max_steps=200, time=T0 + 20 + (i - 1))
                 for i in range(1, 51)]]
    t = timing_of("resumed", records, T0, T0 + 75, probe=False, finished=True)
    assert (t.first_step, t.start_step) == (151, 150)
    est = estimate(timing=t, steps=200, eval_every=None, end_tail_s=None, unit="CPU", workers=1, ratios=[],
                   price=None, currency="")
    assert est.wall_s == pytest.approx(20.0 + 199 * 1.0 + (75 - 69))


def test_a_pool_of_measurements_takes_each_part_s_median():
    fast = timing_of("c", _records([0.0] + [1.0] * 4), T0, T0 + 27, probe=False, finished=True)
    slow = timing_of("b", _records([0.0] + [5.0] * 4, start=60.0), T0, T0 + 90, probe=False, finished=True)
    usual = timing_of("a", _records([0.0] + [1.2] * 4), T0, T0 + 30, probe=False, finished=True)
    pool = pooled([fast, slow, usual])
    assert pool.run_id == "c" and pool.measured_by == ("c", "b", "a")
    assert pool.loop_s_per_step == pytest.approx(1.2) and pool.startup_s == pytest.approx(20.0)
    assert pool.tail_s == pytest.approx(30 - 24.8)
    est = estimate(timing=pool, steps=10, eval_every=None, end_tail_s=None, unit="CPU", workers=1, ratios=[],
                   price=None, currency="")
    assert "run c (steps 1-5) and 2 earlier runs: the median of 3" in est.source
    assert est.source_runs == ("c", "b", "a") and est.high_s > est.wall_s  # the slow run widens the bar
    assert pooled([fast]) is fast


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
