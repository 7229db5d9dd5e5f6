"""The cost of a run before it starts, from what earlier runs of the same workload measured. Pure.

A run (or a probe: the workload's first steps on its real nodes, then cancelled) leaves a
:class:`Timing`: how long it took to reach its first step (start-up: shipping, environment, model and
data), each step's time, each evaluation's, and how long its end took (last evaluation, final save,
export, teardown). :func:`estimate` turns a timing and the steps the new run will make into wall time,
GPU-hours (CPU-hours for a CPU run) and their price, with an error bar from the spread of the step
times. Runs that ended with an estimate recorded leave their real/estimated ratio; the median of the
last few corrects the next estimate, so a workload's estimates improve as it runs.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from launcher.words import plural
from trainer.wire.protocol import MetricRecord

MIN_STEPS = 3
"""Train records a timing needs (two step times at least)."""
RATIO_RUNS = 5
"""How many past runs' real/estimated ratios correct an estimate (their median)."""
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

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "step_s": list(self.step_s)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timing:
        return cls(**{**data, "step_s": tuple(data["step_s"])})


def timing_of(run_id: str, records: Sequence[MetricRecord], created_at: float, ended_at: float | None,
              *, probe: bool, finished: bool) -> Timing | None:
    """A run's timing from its metrics records (``None``: too few steps to say). ``finished``: the run
    made all its steps, so its end is measured too."""
    train = [r for r in records if r.kind == "train" and r.time is not None]
    times = [r.time for r in train if r.time is not None]  # every one of them: a step's moment
    if len(train) < MIN_STEPS:
        return None
    evals = [r for r in records if r.kind == "eval" and isinstance(r.extra.get("eval_seconds"), (int, float))]
    per_step = []
    eval_in_loop = 0.0
    for after_i, (before, after) in enumerate(zip(train, train[1:], strict=False), start=1):
        steps = after.step - before.step
        if steps <= 0:
            continue
        inside = sum(float(e.extra["eval_seconds"]) for e in evals if before.step <= e.step < after.step
                     and e.step > 0)
        eval_in_loop += inside
        per_step.append(max(0.0, (times[after_i] - times[after_i - 1] - inside) / steps))
    if len(per_step) < MIN_STEPS - 1:
        return None
    span = train[-1].step - train[0].step
    loop = (times[-1] - times[0] - eval_in_loop) / span
    eval_s = statistics.median(float(e.extra["eval_seconds"]) for e in evals) if evals else None
    tail = (ended_at - times[-1]) if finished and ended_at is not None else None
    return Timing(run_id=run_id, probe=probe, startup_s=max(0.0, times[0] - created_at),
                  first_step=train[0].step, last_step=train[-1].step, step_s=tuple(per_step),
                  loop_s_per_step=max(0.0, loop), eval_s=eval_s, tail_s=tail,
                  total_steps=train[-1].max_steps, ended_at=ended_at or times[-1])


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

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unmeasured": list(self.unmeasured)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Estimate:
        return cls(**{**data, "unmeasured": tuple(data.get("unmeasured") or ())})

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
            out.append(f"  x{self.correction:.2f}: the median real/estimated wall time of the last "
                       f"{plural(self.corrected_by, 'run')} of this workload")
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
    to_go = max(0, steps - timing.first_step)
    periodic = max(0, steps - 1) // eval_every - max(0, timing.first_step - 1) // eval_every if eval_every else 0
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
    correction = statistics.median(ratios) if ratios else None
    factor = correction or 1.0
    wall, low, high = ((base + to_go * s) * factor for s in (step, low_step, high_step))
    hours = workers * wall / 3600
    kind = "probe" if timing.probe else "run"
    return Estimate(wall_s=wall, low_s=low, high_s=high, steps=steps, startup_s=timing.startup_s, step_s=step,
                    evals=evals, eval_s=eval_s, tail_s=tail,
                    source=f"{kind} {timing.run_id} (steps {timing.first_step}-{timing.last_step})",
                    source_run=timing.run_id, unit=unit, hours=hours,
                    cost=hours * price if price is not None else None, currency=currency if price is not None else "",
                    correction=correction, corrected_by=len(ratios), unmeasured=tuple(unmeasured),
                    fingerprint=fingerprint_)


@dataclass(frozen=True)
class RealFigures:
    """What the end of a run keeps beside its estimate: its real wall time and steps, the error against the
    estimate, and ``ratio`` (real over estimated wall time, before any correction) only for a run that made
    the steps it was estimated for, as only those teach (``None`` otherwise, or not on record)."""

    real_wall_s: float | None
    steps_done: int | None
    succeeded: bool
    error: float | None
    ratio: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: object) -> RealFigures | None:
        if not isinstance(data, dict):
            return None

        def number(key: str) -> float | None:
            value = data.get(key)
            return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        steps = data.get("steps_done")
        return cls(number("real_wall_s"), steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
                   data.get("succeeded") is True, number("error"), number("ratio"))


def real_vs_estimate(est: Estimate, wall_s: float, steps_done: int | None, succeeded: bool) -> RealFigures:
    """What the end of a run keeps beside its estimate (:class:`RealFigures`)."""
    raw = est.wall_s / (est.correction or 1.0)
    complete = succeeded and steps_done is not None and steps_done >= est.steps
    return RealFigures(wall_s, steps_done, succeeded, (wall_s - est.wall_s) / est.wall_s if est.wall_s else None,
                       wall_s / raw if complete and raw > 0 else None)
