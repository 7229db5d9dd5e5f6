"""Estimates read from and kept in the run store: the history of a workload (its runs and probes with
the same :func:`~launcher.runs.core.estimate.fingerprint`), the estimate a launch keeps in its run
folder (``estimate.json``), and the real figure its owner writes beside it at the end.

Both sides use it: the launch and the readers (``run --dry-run``, the editor, ``doctor --estimate``)
estimate; the owner settles. Nothing here raises for a missing or unreadable record: an estimate is
advice, never a reason for a launch to fail."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.runs.core.estimate import (
    POOL_RUNS,
    RATIO_RUNS,
    Ended,
    Estimate,
    RealFigures,
    Timing,
    estimate,
    fingerprint,
    pooled,
    real_vs_estimate,
    steps_to_run,
    timing_of,
)
from launcher.runs.core.layout import (
    LOG_METRICS,
    METRICS,
    read_json,
    read_options,
    read_plan,
    read_records,
    write_whole,
)
from launcher.runs.core.run_kind import PROBE_TAG as PROBE_TAG
from launcher.runs.core.store import RunRecord, RunStore, StoreDamaged
from launcher.words import plural
from trainer.wire.protocol import ResumeCheck

if TYPE_CHECKING:
    from launcher.workload.plan import RunPlan

ESTIMATE = "estimate.json"
"""In a run's folder: the estimate made at its launch and, once it ended, the real figure beside it."""
STORE_FILE = "runs.db"
HISTORY_RUNS = 30
"""How many of an experiment's newest runs are read for its history."""


@dataclass(frozen=True)
class History:
    """What the store knows of a workload's pace."""

    timing: Timing | None
    """The pace of runs (or probes) of the same fingerprint: the median of the newest few of the kind
    of the newest one (:func:`~launcher.runs.core.estimate.pooled`)."""
    source_parameters: dict[str, Any]
    end_tail_s: float | None
    """The end of the newest finished run of it (for an estimate from a probe)."""
    ratios: tuple[float, ...]
    """Real over estimated wall time of its last runs that kept both, newest first, of estimates made
    from the same kind of measurement as ``timing`` (a probe, or a whole run), less those of the runs
    whose measurement ``timing`` holds."""


def _workload_of(record: RunRecord) -> Mapping[str, Any] | None:
    plan = read_plan(record.directory)
    return plan.workload if plan is not None and plan.workload else None


def _created_at(record: RunRecord) -> float | None:
    return record.transitions[0][0] if record.transitions else record.summary.started_at


def is_probe(record: RunRecord) -> bool:
    return read_options(record.directory).tagged(PROBE_TAG)


def run_timing(record: RunRecord) -> Timing | None:
    """A stored run's timing from its metrics records (the reporter's, else those read from its log)."""
    created = _created_at(record)
    if created is None:
        return None
    s = record.summary
    sizes = tuple(_size(record.directory / name) for name in (METRICS, LOG_METRICS))
    return _timing(str(record.directory), s.run_id, created, s.ended_at, s.state.value, is_probe(record), sizes)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


@functools.lru_cache(maxsize=64)
def _timing(directory: str, run_id: str, created: float, ended_at: float | None, state: str, probe: bool,
            sizes: tuple[int, int]) -> Timing | None:
    """Read once per run and size: the editor estimates at every pause in typing, and a long run's
    metrics file is large. ``sizes`` is part of the key only."""
    records = read_records(Path(directory) / METRICS) or read_records(Path(directory) / LOG_METRICS)
    finished = state == "succeeded" and ended_at is not None
    return timing_of(run_id, records, created, ended_at, probe=probe, finished=finished)


@dataclass(frozen=True)
class KeptEstimate:
    """A run's ``estimate.json``: the estimate its launch made (``None``: the file's is not one) and, once it
    ended, the real figures beside it; ``source`` where the estimate came from, in words."""

    estimate: Estimate | None
    real: RealFigures | None = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON, as the launch and the owner wrote it (``show --json``)."""
        return {**({"estimate": self.estimate.to_dict()} if self.estimate is not None else {}),
                **({"real": self.real.to_dict()} if self.real is not None else {})}

    @classmethod
    def from_wire(cls, data: object) -> KeptEstimate | None:
        if not isinstance(data, dict):
            return None
        given = data.get("estimate")
        try:
            est = Estimate.from_dict(given) if isinstance(given, dict) else None
        except TypeError:  # another version's fields, or not an estimate
            est = None
        source = given.get("source") if isinstance(given, dict) else None
        return cls(est, RealFigures.from_wire(data.get("real")), source if isinstance(source, str) else "")


def read_kept(directory: Path) -> KeptEstimate | None:
    """The run's kept estimate (``None``: it launched without one)."""
    return KeptEstimate.from_wire(read_json(directory / ESTIMATE))


def history(home: Path, workload: dict[str, Any], *, exclude: str | None = None) -> History:
    """The newest measurements of runs of the same workload (any state: a failed run's steps count)."""
    if not (Path(home) / STORE_FILE).exists():
        return History(None, {}, None, ())  # no run yet: a dry run creates no store
    store = RunStore(home)
    wanted = fingerprint(workload)
    timings: list[Timing] = []
    params: dict[str, Any] = {}
    tail = None
    learned: list[tuple[str, bool, float]] = []  # (the run that learned it, against a probe's estimate, ratio)
    for summary in store.list_runs(experiment=workload.get("experiment_name"), limit=HISTORY_RUNS):
        if summary.run_id == exclude or not summary.state.is_final:
            continue
        record = store.get_run(summary.run_id)
        if record is None:
            continue
        theirs = _workload_of(record)
        if theirs is None or fingerprint(theirs) != wanted:
            continue
        ratio = _ratio(summary.run_id, read_kept(record.directory))
        if ratio is not None:
            learned.append((summary.run_id, *ratio))
        if tail is not None and _pool_full(timings):
            continue
        found = run_timing(record)
        if found is None:
            continue
        if not timings:
            params = theirs.get("parameters") or {}
        timings.append(found)
        if tail is None and found.tail_s is not None:
            tail = found.tail_s
    if not timings:
        return History(None, params, tail, ())
    timing = pooled([t for t in timings if t.probe == timings[0].probe][:POOL_RUNS])
    # A ratio corrects estimates of its own kind: one from a probe (whose end and load were not the
    # run's) says nothing of an estimate from a whole run, and the other way round. A run whose own
    # measurement is in the pace lends it no ratio: its ratio is how it differed from the runs before
    # it, which its measurement already says.
    same = tuple(r for run, probe, r in learned
                 if probe == timing.probe and run not in timing.measured_by)[:RATIO_RUNS]
    return History(timing, params, tail, same)


def _pool_full(timings: list[Timing]) -> bool:
    return bool(timings) and sum(t.probe == timings[0].probe for t in timings) >= POOL_RUNS


def _ratio(run_id: str, kept: KeptEstimate | None) -> tuple[bool, float] | None:
    """What a run's kept estimate teaches: the ratio of a run compared with an estimate made before it
    from other runs (an older record without ``compared`` counts when it kept a ratio)."""
    real = kept.real if kept is not None else None
    if kept is None or real is None or real.compared is False or real.ratio is None or real.ratio <= 0:
        return None
    est = kept.estimate
    if est is not None and (run_id == est.source_run or run_id in est.source_runs):
        return None  # never a run measured against itself
    return kept.source.startswith("probe"), float(real.ratio)


def estimate_plan(home: Path, plan: RunPlan, *, exclude: str | None = None) -> Estimate | None:
    """The estimate of ``plan`` from its workload's history; ``None`` when nothing was measured yet (or
    its number of steps cannot be known)."""
    workload = plan.workload.model_dump(mode="json")
    past = history(home, workload, exclude=exclude)
    if past.timing is None:
        return None
    steps = steps_to_run(plan.workload.parameters, past.timing, past.source_parameters)
    if steps is None:
        return None
    topo = plan.topology
    price, currency = _price(plan)
    params = plan.workload.parameters
    every = (params.get("logging") or {}).get("eval_every_steps") if plan.uses_builtin_trainer else None
    saves = (params.get("checkpoint") or {}).get("every_steps") if plan.uses_builtin_trainer else None
    unmeasured = []
    if past.timing.probe and isinstance(saves, int) and steps > saves:
        unmeasured.append(f"{plural((steps - 1) // saves, 'checkpoint save')} (a probe saves none)")
    return estimate(timing=past.timing, steps=steps, eval_every=every if isinstance(every, int) else None,
                    end_tail_s=past.end_tail_s, unit=topo.kind.upper(), workers=topo.world_size,
                    ratios=past.ratios, price=price, currency=currency, fingerprint_=fingerprint(workload),
                    unmeasured=unmeasured)


def _price(plan: RunPlan) -> tuple[float | None, str]:
    """Per GPU-hour (CPU-hour) from the user's price settings, as ``show`` prices a run's usage."""
    from launcher.runs.core.settings_prices import prices_set
    from launcher.runs.core.usage import price_per_hour

    prices = prices_set()
    if prices is None:
        return None, ""
    topo = plan.topology
    hosts = [h.display for h in topo.hosts] or [None]
    rates = [price_per_hour(prices, topo.kind, topo.gpu_model, h) for h in hosts]
    known = [r for r in rates if r is not None]
    if len(known) < len(rates):
        return None, ""
    return sum(known) / len(known), prices.currency


def advised_estimate(home: Path, plan: RunPlan) -> Estimate | None:
    """The estimate a dry run and the editor show of a plan's cost; ``None`` when nothing was measured yet,
    or the store cannot be read (advice only: a damaged store is said by the commands that read runs)."""
    try:
        return estimate_plan(home, plan)
    except (OSError, ValueError, sqlite3.Error, StoreDamaged):
        return None


def keep_estimate(directory: Path, est: Estimate) -> None:
    """The launch's estimate, in the run's folder."""
    _write(directory, {"estimate": est.to_dict()})


def settle(directory: Path, record: RunRecord, *, state: str | None = None,
           ended_at: float | None = None) -> RealFigures | None:
    """At a run's end: its real wall time and steps beside the estimate it launched with (kept in the
    folder for later estimates); ``None`` when it launched without one. ``state`` and ``ended_at``: the end
    about to be recorded, when the figure is settled before it (a reader told of the end finds it there)."""
    kept = read_kept(directory)
    ended_at = record.summary.ended_at if ended_at is None else ended_at
    if kept is None or kept.estimate is None or ended_at is None:
        return None
    created = _created_at(record)
    if created is None:
        return None
    real = real_vs_estimate(kept.estimate, ended_at - created, ended_of(record, state))
    _write(directory, KeptEstimate(kept.estimate, real).to_dict())
    return real


def ended_of(record: RunRecord, state: str | None = None) -> Ended:
    """How a run ended, from its state and its own train records: the steps it made, and the step it
    resumed after (its resume check's, else the step before its first record when that is beyond the
    first logging interval: a resume the trainer did not check)."""
    records = read_records(record.directory / METRICS) or read_records(record.directory / LOG_METRICS)
    steps = [r.step for r in records if r.kind == "train"]
    first, last = (min(steps), max(steps)) if steps else (None, None)
    start = next((c.from_step for c in map(ResumeCheck.from_record, records) if c is not None and c.from_step), 0)
    every = _logging_every(record)
    if not start and first is not None and every is not None and first > every:
        start = first - 1
    if start and last is None:
        last = start  # resumed where it had every step already: nothing trained
    return Ended(state or record.summary.state.value, first, last, start, is_probe(record))


def _logging_every(record: RunRecord) -> int | None:
    """The built-in trainer's ``logging.every_steps`` (its first record's step at the latest); ``None``
    for a script, whose first logged step says nothing of a resume."""
    workload = _workload_of(record) or {}
    if workload.get("command"):
        return None
    every = ((workload.get("parameters") or {}).get("logging") or {}).get("every_steps", 1)
    return every if isinstance(every, int) and every > 0 else 1


def _write(directory: Path, data: dict[str, Any]) -> None:
    write_whole(directory / ESTIMATE, json.dumps(data, indent=1))
