"""The cost of a run before it starts, from what earlier runs of the same workload measured. Pure.

A run (or a probe: the workload's first steps on its real nodes, then cancelled) leaves a
:class:`Timing`: how long it took to reach its first step (start-up: shipping, environment, model and
data), each step's time, each evaluation's, and how long its end took (last evaluation, final save,
export, teardown). :func:`estimate` turns a timing and the steps the new run will make into wall time,
GPU-hours (CPU-hours for a CPU run) and their price, with an error bar from the spread of the step
times. The pace is the median of the workload's newest few measurements of one kind (probes, or runs),
so one slow or fast run does not carry the next estimate with it.

A run that succeeded and made every step from the first, launched with an estimate made before it from
other runs' measurements, leaves its real/estimated ratio (:func:`real_vs_estimate`); the median of the
last few such ratios corrects the next estimate, within :data:`MAX_CORRECTION`, and never with the ratio of
a run whose own measurement the estimate uses (that ratio says how that run differed from the runs
before it, which its measurement already holds: applied again, the error compounds).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from launcher.words import plural
from trainer.wire.protocol import MetricRecord, ResumeCheck

MIN_STEPS = 3
"""Train records a timing needs (two step times at least)."""
RATIO_RUNS = 5
"""How many past runs' real/estimated ratios correct an estimate (their median)."""
POOL_RUNS = 3
"""How many of a workload's newest measurements (of one kind) give an estimate's pace: their median."""
RATIO_CLAMP = 2.0
"""A ratio counts as at most this (at least its inverse): an outlier's weight in the median is bounded."""
MAX_CORRECTION = 1.5
"""The most the correction may scale an estimate, either way, whatever the past ratios say."""
MIN_RATIOS = 3
"""Ratios a correction needs: fewer say how a run or two differed from the runs before them, not how
the estimate errs."""
AGREE = 0.8
"""The share of the ratios that must lie on the same side of 1 as their median: ratios that scatter
around 1 are the runs' own spread (a busy hour, a quiet one), which a correction would only add to."""
LENGTH_KEYS = ("max_steps", "num_epochs", "output_dir")
"""``parameters`` keys that change how long a run is or where it writes, not how fast it steps."""
IGNORED_SECTIONS = ("checkpoint",)
"""``parameters`` sections left out of the fingerprint: how often a run saves (a probe saves nothing)."""


def fingerprint(workload: Mapping[str, Any]) -> str:
    """What makes two runs step alike: the workload as recorded, less its length, its outputs, its
    checkpoints, its MLflow settings and its identity tokens. Runs with the same fingerprint are the
    history an estimate reads."""
    params = {k: v for k, v in (workload.get("parameters") or {}).items()
              if k not in LENGTH_KEYS and k not in IGNORED_SECTIONS}
    kept = {k: v for k, v in workload.items()
            if k not in ("parameters", "mlflow", "mlflow_run_name", "idempotency_token", "sweep", "max_retries",
                         "timeout_minutes", "notify", "metrics")}
    kept["parameters"] = params
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Timing:
    """What one run of a workload measured of its own pace."""

    run_id: str
    probe: bool
    """A probe (cancelled after its first steps) rather than a run."""
    startup_s: float
    """From the run's creation to its first step's record (that step included)."""
    first_step: int
    last_step: int
    step_s: tuple[float, ...]
    """Seconds per step between consecutive train records, without the evaluations between them."""
    loop_s_per_step: float
    """The mean step over the whole stretch measured: checkpoints and pauses amortised, evaluations out."""
    eval_s: float | None
    """Median seconds of one evaluation."""
    tail_s: float | None
    """From the last step's record to the run's end (a run that finished); ``None`` for a probe."""
    total_steps: int | None
    """The run's total steps as the trainer (or the log's ``step=N/M``) reported it."""
    ended_at: float
    start_step: int = 0
    """The step the run started after: 0, or the checkpoint's step for a run that resumed. The steps
    inside its start-up are ``first_step - start_step``."""
    runs: tuple[str, ...] = ()
    """The measurements a pooled timing (:func:`pooled`) is the median of, newest first; empty for one run's."""

    @property
    def measured_by(self) -> tuple[str, ...]:
        """Every run whose measurement is in this timing."""
        return self.runs or (self.run_id,)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "step_s": list(self.step_s), "runs": list(self.runs)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timing:
        return cls(**{**data, "step_s": tuple(data["step_s"]), "runs": tuple(data.get("runs") or ())})


def timing_of(run_id: str, records: Sequence[MetricRecord], created_at: float, ended_at: float | None,
              *, probe: bool, finished: bool) -> Timing | None:
    """A run's timing from its metrics records (``None``: too few steps to say). ``finished``: the run
    made all its steps, so its end is measured too. The loop's pace is taken over the stretches where
    the step grew (a retry that started again from an earlier step is not a step of negative time)."""
    train = [r for r in records if r.kind == "train" and r.time is not None]
    times = [r.time for r in train if r.time is not None]  # every one of them: a step's moment
    if len(train) < MIN_STEPS:
        return None
    evals = [(r.step, float(s)) for r in records  # (step, its evaluation's seconds)
             if r.kind == "eval" and isinstance(s := r.extra.get("eval_seconds"), (int, float))]
    per_step = []
    loop_time, loop_steps = 0.0, 0
    for after_i, (before, after) in enumerate(zip(train, train[1:], strict=False), start=1):
        steps = after.step - before.step
        if steps <= 0:
            continue
        inside = sum(s for step, s in evals if before.step <= step < after.step and step > 0)
        seconds = max(0.0, times[after_i] - times[after_i - 1] - inside)
        loop_time, loop_steps = loop_time + seconds, loop_steps + steps
        per_step.append(seconds / steps)
    if len(per_step) < MIN_STEPS - 1:
        return None
    eval_s = statistics.median(s for _step, s in evals) if evals else None
    tail = (ended_at - times[-1]) if finished and ended_at is not None else None
    resumed = [c.from_step for c in map(ResumeCheck.from_record, records) if c is not None and c.from_step]
    start = min(resumed[0], train[0].step - 1) if resumed else 0
    return Timing(run_id=run_id, probe=probe, startup_s=max(0.0, times[0] - created_at),
                  first_step=train[0].step, last_step=train[-1].step, step_s=tuple(per_step),
                  loop_s_per_step=loop_time / loop_steps, eval_s=eval_s, tail_s=tail,
                  total_steps=train[-1].max_steps, ended_at=ended_at or times[-1], start_step=max(0, start))


def pooled(timings: Sequence[Timing]) -> Timing:
    """One timing from a workload's newest measurements (newest first, one kind): each part the median of
    theirs, the step times' spread all of theirs together (the error bar then holds the change of pace
    from run to run too). The newest names it and gives its steps and total."""
    newest = timings[0]
    if len(timings) == 1:
        return newest
    tails = [t.tail_s for t in timings if t.tail_s is not None]
    evals = [t.eval_s for t in timings if t.eval_s is not None]
    return Timing(run_id=newest.run_id, probe=newest.probe,
                  startup_s=statistics.median(t.startup_s for t in timings),
                  first_step=newest.first_step, last_step=newest.last_step,
                  step_s=tuple(s for t in timings for s in t.step_s),
                  loop_s_per_step=statistics.median(t.loop_s_per_step for t in timings),
                  eval_s=statistics.median(evals) if evals else None,
                  tail_s=statistics.median(tails) if tails else None, total_steps=newest.total_steps,
                  ended_at=newest.ended_at, start_step=newest.start_step,
                  runs=tuple(t.run_id for t in timings))


def correction_of(ratios: Sequence[float]) -> tuple[float | None, bool]:
    """The factor past ratios (newest first) apply, and whether it was held: the median of the last
    :data:`RATIO_RUNS`, each clamped to :data:`RATIO_CLAMP`, held to :data:`MAX_CORRECTION`; ``None``
    with fewer than :data:`MIN_RATIOS` of them, or when they do not agree on a direction (:data:`AGREE`):
    the estimate errs one way only then, and only that is worth correcting."""
    used = [min(RATIO_CLAMP, max(1 / RATIO_CLAMP, r)) for r in ratios[:RATIO_RUNS]]
    if len(used) < MIN_RATIOS:
        return None, False
    middle = statistics.median(used)
    same_side = sum((r > 1) == (middle > 1) and r != 1 for r in used)
    if middle == 1 or same_side < AGREE * len(used):
        return None, False
    held = min(MAX_CORRECTION, max(1 / MAX_CORRECTION, middle))
    return held, held != middle


@dataclass(frozen=True)
class Estimate:
    """What a run will take, and where the figure comes from."""

    wall_s: float
    low_s: float
    high_s: float
    """The error bar: the 10th and 90th percentile step times over every step to go."""
    steps: int
    startup_s: float
    step_s: float
    evals: int
    eval_s: float
    tail_s: float
    source: str
    """Which measurement it came from, in words (``probe 2026...`` / ``run 2026...``)."""
    source_run: str
    unit: str
    """``GPU`` or ``CPU``: what an hour counts."""
    hours: float
    cost: float | None = None
    currency: str = ""
    correction: float | None = None
    """The median real/estimated ratio of past runs applied, when there were any."""
    corrected_by: int = 0
    unmeasured: tuple[str, ...] = field(default=())
    """Parts of the run no measurement covered (taken as nothing)."""
    fingerprint: str = ""
    source_runs: tuple[str, ...] = ()
    """Every run whose measurement is in the pace, newest first (``source_run`` is the first)."""
    held: bool = False
    """The correction was held to :data:`MAX_CORRECTION` (the ratios' median lay beyond it)."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unmeasured": list(self.unmeasured), "source_runs": list(self.source_runs)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Estimate:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "unmeasured": tuple(data.get("unmeasured") or ()),
                      "source_runs": tuple(data.get("source_runs") or ())})

    def lines(self) -> list[str]:
        """What ``run --dry-run``, ``doctor --estimate`` and the editor say."""
        money = f", ~{self.cost:.2f} {self.currency}" if self.cost is not None else ""
        out = [f"estimate: {_clock(self.wall_s)} wall ({_clock(self.low_s)} to {_clock(self.high_s)}), "
               f"{self.hours:.2f} {self.unit}-hours{money}",
               f"  {plural(self.steps, 'step')} x {self.step_s:.3f} s + start-up {_clock(self.startup_s)}"
               + (f" + {self.evals} evaluations x {self.eval_s:.2f} s" if self.evals else "")
               + (f" + end {_clock(self.tail_s)}" if self.tail_s else ""),
               f"  measured by {self.source}"]
        if self.correction is not None:
            held = f" (held to x{1 / MAX_CORRECTION:.2f}-x{MAX_CORRECTION:.2f})" if self.held else ""
            out.append(f"  x{self.correction:.2f}: the median real/estimated wall time of the last "
                       f"{plural(self.corrected_by, 'run')} of this workload{held}")
        elif self.corrected_by:
            why = ("too few to correct by" if self.corrected_by < MIN_RATIOS else
                   "they scatter around 1: the runs' own spread, not the estimate's error")
            out.append(f"  not corrected: {plural(self.corrected_by, 'past run')} compared with "
                       f"{'its' if self.corrected_by == 1 else 'their'} estimates ({why})")
        if self.unmeasured:
            out.append(f"  not measured (taken as nothing): {', '.join(self.unmeasured)}")
        return out


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def steps_to_run(parameters: dict[str, Any], timing: Timing, source_parameters: dict[str, Any]) -> int | None:
    """The steps the new run makes: its ``max_steps``, else the source's total scaled by the epochs."""
    if isinstance(parameters.get("max_steps"), int):
        return parameters["max_steps"]
    if timing.total_steps is None or isinstance(source_parameters.get("max_steps"), int):
        return None  # the source's total was its own max_steps: the data's size is not known from it
    epochs = parameters.get("num_epochs") or 1
    return max(1, round(timing.total_steps * epochs / (source_parameters.get("num_epochs") or 1)))


def estimate(*, timing: Timing, steps: int, eval_every: int | None, end_tail_s: float | None, unit: str,
             workers: int, ratios: Sequence[float], price: float | None, currency: str,
             fingerprint_: str = "", unmeasured: Sequence[str] = ()) -> Estimate:
    """Wall time = start-up + steps x step time + evaluations + the end, then x the median past ratio.
    ``workers``: GPUs (CPU processes) over all nodes; ``price``: per GPU-hour (CPU-hour) when known;
    ``unmeasured``: what the caller knows the measurement left out."""
    step = timing.loop_s_per_step
    median = statistics.median(timing.step_s)
    low_step = step * (_quantile(timing.step_s, 0.1) / median) if median else step
    high_step = step * (_quantile(timing.step_s, 0.9) / median) if median else step
    in_startup = max(1, timing.first_step - timing.start_step)  # the steps its start-up holds
    to_go = max(0, steps - in_startup)
    periodic = max(0, steps - 1) // eval_every - (in_startup - 1) // eval_every if eval_every else 0
    eval_s = timing.eval_s or 0.0
    unmeasured = list(unmeasured)
    tail = timing.tail_s if timing.tail_s is not None else end_tail_s
    # A finished run's end holds its last evaluation; a probe's estimate counts it apart.
    evals = periodic + (1 if timing.tail_s is None else 0)
    if tail is None:
        tail = 0.0
        unmeasured.append("the end (final save, export, teardown)")
    if timing.eval_s is None:
        evals, eval_s = 0, 0.0
    base = timing.startup_s + evals * eval_s + tail
    correction, held = correction_of(ratios)
    factor = correction or 1.0
    wall, low, high = ((base + to_go * s) * factor for s in (step, low_step, high_step))
    hours = workers * wall / 3600
    kind = "probe" if timing.probe else "run"
    source = f"{kind} {timing.run_id} (steps {timing.first_step}-{timing.last_step})"
    if len(timing.measured_by) > 1:
        more = len(timing.measured_by) - 1
        source += f" and {plural(more, f'earlier {kind}')}: the median of {more + 1}"
    used = ratios[:RATIO_RUNS]
    return Estimate(wall_s=wall, low_s=low, high_s=high, steps=steps, startup_s=timing.startup_s, step_s=step,
                    evals=evals, eval_s=eval_s, tail_s=tail, source=source,
                    source_run=timing.run_id, unit=unit, hours=hours,
                    cost=hours * price if price is not None else None, currency=currency if price is not None else "",
                    correction=correction, corrected_by=len(used), unmeasured=tuple(unmeasured),
                    fingerprint=fingerprint_, source_runs=timing.measured_by, held=held)


@dataclass(frozen=True)
class Ended:
    """How a run that launched with an estimate ended, as its record says."""

    state: str
    """The run's final state (``succeeded``, ``failed``, ``cancelled``, ...)."""
    first_step: int | None
    """Its first train record's step (``None``: it made no step)."""
    last_step: int | None
    start_step: int = 0
    """The step it resumed after (0: it started from the first step)."""
    probe: bool = False


@dataclass(frozen=True)
class RealFigures:
    """What the end of a run keeps beside its estimate: its real wall time and steps; ``error`` and
    ``ratio`` (real over estimated wall time, before any correction) only for a run that is what was
    estimated (``compared``); ``why`` says why another run is not compared, in words ``show`` prints.
    ``compared`` is ``None`` for a record written before it was kept (then a kept ratio says it was)."""

    real_wall_s: float | None
    steps_done: int | None
    succeeded: bool
    error: float | None
    ratio: float | None
    compared: bool | None = None
    why: str | None = None

    @property
    def was_compared(self) -> bool:
        """The run was compared with its estimate (an older record: it kept a ratio)."""
        return self.compared if self.compared is not None else self.ratio is not None

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON as the owner wrote it (an older record without ``compared`` stays without)."""
        said = {"compared": self.compared, "why": self.why} if self.compared is not None else {}
        return {"real_wall_s": self.real_wall_s, "steps_done": self.steps_done, "succeeded": self.succeeded,
                **said, "error": self.error, "ratio": self.ratio}

    @classmethod
    def from_wire(cls, data: object) -> RealFigures | None:
        if not isinstance(data, dict):
            return None

        def number(key: str) -> float | None:
            value = data.get(key)
            return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        steps, compared, why = data.get("steps_done"), data.get("compared"), data.get("why")
        return cls(number("real_wall_s"), steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
                   data.get("succeeded") is True, number("error"), number("ratio"),
                   compared if isinstance(compared, bool) else None, why if isinstance(why, str) else None)


def real_vs_estimate(est: Estimate, wall_s: float, ended: Ended) -> RealFigures:
    """What the end of a run keeps beside its estimate (:class:`RealFigures`). ``error`` and ``ratio`` only
    for a run that is what was estimated: it succeeded, made every step from the first (not a resume: the
    estimate counted from step 1) and is not a probe."""
    raw = est.wall_s / (est.correction or 1.0)
    done = 0 if ended.last_step is None else ended.last_step - ended.start_step
    why = _not_compared(est, ended, done)
    compared = why is None and est.wall_s > 0 and raw > 0
    return RealFigures(wall_s, done, ended.state == "succeeded",
                       (wall_s - est.wall_s) / est.wall_s if compared else None,
                       wall_s / raw if compared else None, compared, why)


def _not_compared(est: Estimate, ended: Ended, done: int) -> str | None:
    if ended.probe:
        return "a probe, cancelled after its first steps"
    if ended.start_step:
        trained = "trained nothing" if done <= 0 else f"trained {plural(done, 'step')}"
        return f"resumed from step {ended.start_step} and {trained}; the estimate counted from step 1"
    if ended.state != "succeeded":
        at = f" at step {ended.last_step} of {est.steps}" if ended.last_step is not None else " before its first step"
        return f"{ended.state}{at}"
    if done <= 0:
        return "trained nothing"
    if done < est.steps:
        return f"made {done} of the {plural(est.steps, 'step')} estimated"
    return None
