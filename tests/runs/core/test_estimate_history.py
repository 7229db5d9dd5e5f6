"""Estimates from the run store (a real SQLite store and run folders, no job): which past runs are the
same workload, which measurement is used, which ratios correct it, and what a run keeps at its end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.events import RunState
from launcher.runs.core.estimates import (
    PROBE_TAG,
    advised_estimate,
    estimate_plan,
    history,
    keep_estimate,
    settle,
)
from launcher.runs.core.store import RunStore
from launcher.runs.launch import create_run
from launcher.workload.model import Workload
from launcher.workload.plan import build_plan
from trainer.wire.protocol import MetricRecord, ResumeCheck

BASE = {"experiment_name": "est", "compute": {"accelerator_type": "CPU", "procs_per_node": 2},
        "parameters": {"model_name": "builtin:tiny-llama", "dataset_name": "builtin:tiny-alpaca", "output_dir": "o",
                       "max_steps": 50, "per_device_batch_size": 8}}


def _plan(run_id: str, **params):
    workload = Workload.model_validate({**BASE, "parameters": {**BASE["parameters"], **params}})
    return build_plan(workload, run_id=run_id)


def _past(home: Path, run_id: str, *, step_s: float, steps: int = 10, state=RunState.SUCCEEDED, probe=False,
          ratio: tuple[str, float] | None = None, **params) -> None:
    """A finished run in the store: 10 s of start-up, then ``steps`` steps of ``step_s`` each, 3 s of end;
    ``ratio``: (the kind of measurement its launch estimate came from, the ratio its end kept), or
    (``run NAME``, ratio) for an estimate from run NAME."""
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
        source = ratio[0] if " " in ratio[0] else f"{ratio[0]} x"
        (directory / "estimate.json").write_text(json.dumps({
            "estimate": {"source": source, "source_run": source.split()[1]},
            "real": {"ratio": ratio[1], "compared": True}}))
    store.record_metric_summary(run_id, step=steps)
    store.set_state(run_id, state, 1, "", at=times[-1] + 3)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_TUI_HOME", str(tmp_path))  # the settings (prices) live there too
    return tmp_path


def test_the_newest_runs_of_the_same_workload_are_the_measurement(home):
    _past(home, "a-oldest", step_s=7.0)  # a fourth: out of the pool
    _past(home, "b-old", step_s=2.0)
    _past(home, "c-other-batch", step_s=9.0, per_device_batch_size=4)  # another workload: another pace
    _past(home, "d-mid", step_s=1.2)
    _past(home, "e-new", step_s=1.0, max_steps=500, output_dir="elsewhere")  # same pace, other length
    past = history(home, _plan("x").workload.model_dump(mode="json"))
    assert past.timing.run_id == "e-new" and past.timing.measured_by == ("e-new", "d-mid", "b-old")
    assert past.timing.loop_s_per_step == pytest.approx(1.2)  # the median: one slow run does not carry it
    assert past.end_tail_s == pytest.approx(3.0) and past.ratios == ()
    est = estimate_plan(home, _plan("x", max_steps=100))
    assert est.steps == 100 and est.source.startswith("run e-new") and "the median of 3" in est.source
    assert est.wall_s == pytest.approx(10 + 99 * 1.2 + 3.0)  # start-up (step 1 included), 99 more, the end
    assert est.unit == "CPU" and est.hours == pytest.approx(2 * est.wall_s / 3600) and est.cost is None


def test_a_probe_measures_the_steps_and_the_last_finished_run_the_end(home):
    _past(home, "a-run", step_s=2.0)
    _past(home, "b-probe", step_s=1.5, state=RunState.CANCELLED, probe=True)
    est = estimate_plan(home, _plan("x"))
    assert est.source.startswith("probe b-probe") and est.tail_s == pytest.approx(3.0) and est.unmeasured == ()
    assert est.wall_s == pytest.approx(10 + 49 * 1.5 + 3.0)


def test_ratios_correct_only_estimates_from_their_own_kind_of_measurement(home):
    for name, ratio in (("a1", 1.5), ("a2", 1.4), ("a3", 1.6)):
        _past(home, name, step_s=1.0, ratio=("probe", ratio))
    for name, ratio in (("b1", 1.1), ("b2", 1.3), ("b3", 1.2)):
        _past(home, name, step_s=1.0, ratio=("run", ratio))
    for name in ("d", "e", "f"):  # the pool: their own ratios would be theirs
        _past(home, name, step_s=1.0)
    from_run = estimate_plan(home, _plan("x"))
    assert from_run.correction == pytest.approx(1.2) and from_run.corrected_by == 3
    _past(home, "g-probe", step_s=1.0, state=RunState.CANCELLED, probe=True)
    from_probe = estimate_plan(home, _plan("x"))
    assert from_probe.source.startswith("probe") and from_probe.correction == pytest.approx(1.5)


def test_a_run_s_ratio_never_corrects_an_estimate_from_its_own_measurement(home):
    """A run estimated from an older, slower one ran in half the time: its ratio (0.44) says how it
    differed from that one. The next estimate measures it; multiplied again by its ratio, it would
    predict half the time of the very run it measured."""
    _past(home, "a-slow", step_s=5.0, steps=10)
    _past(home, "b-fast", step_s=1.0, steps=10, ratio=("run a-slow", 0.44))
    est = estimate_plan(home, _plan("x", max_steps=10))
    assert est.source_runs == ("b-fast", "a-slow") and est.correction is None
    assert est.wall_s == pytest.approx(10 + 9 * 3.0 + 3.0)  # the median of both: no ratio applied on top


def test_a_recorded_history_with_an_outlier_moves_the_estimate_a_bounded_factor(home):
    """A workload's history as its runs kept it: each run's real/estimated ratio, one of them from a run
    that took ten times its estimate (a machine busy for that run alone)."""
    def history_of(prefix: str, ratios: list[float]) -> None:
        for i, ratio in enumerate(ratios):
            _past(home, f"{prefix}{i}", step_s=1.0, ratio=(f"run {prefix}{i - 1 if i else 'x'}", ratio))
        for i in range(3):  # the newest three: the pool, whose own ratios do not count
            _past(home, f"{prefix}p{i}", step_s=1.0)

    plain = 10 + 49 * 1.0 + 3.0
    history_of("a", [1.05, 0.97, 10.0, 1.02, 0.99])  # the others met their estimates: nothing to correct
    est = estimate_plan(home, _plan("x"))
    assert est.correction is None and est.corrected_by == 5 and est.wall_s == pytest.approx(plain)
    assert "they scatter around 1" in "\n".join(est.lines())
    history_of("b", [1.2, 1.25, 10.0, 1.22, 1.18])  # they ran 20% long: the outlier counts as x2, one of five
    est = estimate_plan(home, _plan("x"))
    assert est.correction == pytest.approx(1.22) and est.wall_s == pytest.approx(plain * 1.22)
    history_of("c", [1.2, 10.0, 10.0, 10.0, 1.25])  # outliers for most of the five: held to the bound
    est = estimate_plan(home, _plan("x"))
    assert est.correction == pytest.approx(1.5) and est.held and "held to x0.67-x1.50" in "\n".join(est.lines())


def test_prices_from_the_settings_price_the_estimate(home):
    (home / "settings.json").write_text(json.dumps({"prices": {"currency": "EUR", "cpu_hour": 0.4}}))
    _past(home, "a", step_s=1.0)
    est = estimate_plan(home, _plan("x"))
    assert est.currency == "EUR" and est.cost == pytest.approx(est.hours * 0.4)


def test_nothing_measured_says_how_to_measure(home):
    _past(home, "a-running", step_s=1.0, state=RunState.RUNNING)  # not ended: not history yet
    from launcher.present.plan_preview import estimate_lines

    assert advised_estimate(home, _plan("x")) is None
    [line] = estimate_lines(advised_estimate(home, _plan("x")), "w.yaml")
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



def test_the_real_figure_is_kept_before_the_end_is_recorded_and_equals_the_figure_after(home):
    """The owner settles the real figure before it records the run's end (a reader told of the end, as
    ``run`` is, finds the figure there): from the running record and the end about to be recorded, the
    same figure as from the ended record."""
    _past(home, "a", step_s=1.0)
    est = estimate_plan(home, _plan("x", max_steps=10))
    _past(home, "b", step_s=1.0, state=RunState.RUNNING)
    store = RunStore(home)
    running = store.get_run("b")
    keep_estimate(running.directory, est)
    ended_at = running.transitions[0][0] + 10 + 9 * 1.0 + 3
    before = settle(running.directory, running, state="succeeded", ended_at=ended_at)
    assert json.loads((running.directory / "estimate.json").read_text())["real"] == before.to_dict()
    store.set_state("b", RunState.SUCCEEDED, 1, "", at=ended_at)
    after = settle(running.directory, store.get_run("b"))
    assert before == after and before.succeeded and before.ratio == pytest.approx(before.real_wall_s / est.wall_s)
    assert settle(running.directory, running) is None  # still running, no end given: nothing to settle

def test_a_resume_and_a_cancelled_run_keep_no_ratio_and_say_why(home):
    """What the end keeps for runs that are not what was estimated: a resume that found every step done
    (its record still says step 10 of 10), a resume that made the last steps, a run cancelled midway."""
    _past(home, "a", step_s=1.0)
    est = estimate_plan(home, _plan("x", max_steps=10))
    store = RunStore(home)
    _past(home, "b-resumed-nothing", step_s=1.0)
    record = store.get_run("b-resumed-nothing")
    (record.directory / "metrics.jsonl").write_text("")  # no step made: the checkpoint held all ten
    keep_estimate(record.directory, est)
    real = settle(record.directory, record)
    assert record.summary.step == 10 and record.summary.state == RunState.SUCCEEDED
    assert real.ratio is None and real.error is None and real.why == "trained nothing"

    _past(home, "c-resumed", step_s=1.0)
    record = store.get_run("c-resumed")
    lines = (record.directory / "metrics.jsonl").read_text().splitlines()
    resumed = [json.loads(line) for line in lines[6:]]  # steps 7-10, after a checkpoint of step 6
    check = ResumeCheck("verified", 7, from_step=6).record().to_json()
    (record.directory / "metrics.jsonl").write_text(check + "\n" + "".join(json.dumps(r) + "\n" for r in resumed))
    keep_estimate(record.directory, est)
    real = settle(record.directory, record)
    assert real.ratio is None and real.steps_done == 4
    assert real.why.startswith("resumed from step 6 and trained 4 steps")

    _past(home, "d-cancelled", step_s=1.0, steps=4, state=RunState.CANCELLED)
    record = store.get_run("d-cancelled")
    keep_estimate(record.directory, est)
    real = settle(record.directory, record)
    assert real.ratio is None and real.why == "cancelled at step 4 of 10"
    assert history(home, _plan("x").workload.model_dump(mode="json")).ratios == ()
