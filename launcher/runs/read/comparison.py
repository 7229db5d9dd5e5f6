"""Runs side by side, from their records: one row of measured numbers per run (a sweep's variants, or
any runs), loss curves, and speed-up against the smallest run. Pure reading, no terminal: the sweep
view, ``sweep show`` and ``compare`` render what this computes (:mod:`launcher.present.comparison`)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher.runs.core.layout import LOG_METRICS, METRICS, read_plan, read_records, read_triage
from launcher.runs.core.store import RunStore
from launcher.runs.core.usage import usage_of_record
from trainer.wire.protocol import MetricRecord


@dataclass(frozen=True)
class RunStats:
    """What one run measured. Memory is per rank in GiB: ``peak_*`` is each rank's highest use (GPU peak
    allocated, else resident memory on CPU), max over ranks and spread (max - min) across them."""

    run_id: str
    label: str
    state: str
    signature: str = ""
    """Why it failed (its triage summary), empty otherwise."""
    num_nodes: int | None = 1
    world_size: int | None = 1
    """Processes in all (``None`` for a variant that never started)."""
    tokens_per_s: float | None = None
    mfu: float | None = None
    step_time_s: float | None = None
    peak_gib: float | None = None
    peak_spread_gib: float | None = None
    gpu_allocated_gib: float | None = None
    gpu_reserved_gib: float | None = None
    rss_gib: float | None = None
    final_loss: float | None = None
    best_loss: float | None = None
    eval_loss: float | None = None
    wall_s: float | None = None
    usage_h: float | None = None
    """GPU-hours (CPU-hours for CPU runs): nodes x processes per node x wall time (:mod:`.usage`)."""
    steps: int | None = None
    speedup: float | None = None
    efficiency: float | None = None
    """Speed-up over the smallest world size, divided by the growth in processes."""
    losses: tuple[tuple[int, float], ...] = field(default=(), repr=False)


def stats_from_records(run_id: str, label: str, state: str, records: list[MetricRecord], *,
                       signature: str = "", num_nodes: int = 1, world_size: int = 1,
                       wall_s: float | None = None) -> RunStats:
    train = [r for r in records if r.kind == "train"]
    tps = [r.tokens_per_s for r in train if r.tokens_per_s is not None]
    tps = tps[1:] if len(tps) > 2 else tps  # the first step pays for start-up
    mfu = [r.mfu for r in train if r.mfu is not None]
    step_times = [(b.time - a.time) / (b.step - a.step) for a, b in zip(train, train[1:], strict=False)
                  if a.time is not None and b.time is not None and b.step > a.step]
    per_rank: dict[int, float] = {}
    alloc = reserved = rss = None
    for r in train:
        for m in r.memory:
            if m.used_gib is not None:
                per_rank[m.rank] = max(per_rank.get(m.rank, 0.0), m.used_gib)
            alloc = _max(alloc, m.allocated_gib)
            reserved = _max(reserved, m.reserved_gib)
            rss = _max(rss, m.rss_gib)
    losses = tuple((r.step, r.loss) for r in train if r.loss is not None)
    evals = [r.eval_loss for r in records if r.eval_loss is not None]
    return RunStats(
        run_id=run_id, label=label, state=state, signature=signature, num_nodes=num_nodes, world_size=world_size,
        tokens_per_s=statistics.fmean(tps) if tps else None, mfu=statistics.fmean(mfu) if mfu else None,
        step_time_s=statistics.median(step_times) if step_times else None,
        peak_gib=max(per_rank.values()) if per_rank else None,
        peak_spread_gib=max(per_rank.values()) - min(per_rank.values()) if per_rank else None,
        gpu_allocated_gib=alloc, gpu_reserved_gib=reserved, rss_gib=rss,
        final_loss=losses[-1][1] if losses else None, best_loss=min(v for _, v in losses) if losses else None,
        eval_loss=evals[-1] if evals else None, wall_s=wall_s, steps=max((r.step for r in train), default=None),
        losses=losses)


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else (a if b is None else max(a, b))


def run_stats(home: Path, run_id: str, label: str = "") -> RunStats:
    """One run's numbers from its record (metrics file, plan, triage, store summary)."""
    record = RunStore(home).get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    directory = record.directory
    records = read_records(directory / METRICS) or read_records(directory / LOG_METRICS)
    plan = read_plan(directory)
    nodes = record.summary.num_nodes
    procs = (plan.whole("compute", "procs_per_node") if plan is not None else None) or 1
    triage = read_triage(directory)
    s = record.summary
    failed = s.state.value in ("failed", "timed_out")
    stats = stats_from_records(run_id, label or s.experiment, s.state.value, records,
                               signature=((triage.summary if triage else "") or s.detail) if failed else "",
                               num_nodes=nodes, world_size=nodes * procs,
                               wall_s=(s.ended_at - s.started_at) if s.started_at and s.ended_at else s.duration_s)
    usage = usage_of_record(record, plan, None, time.time())
    return replace(stats, usage_h=usage.hours) if usage else stats


def with_scaling(rows: list[RunStats]) -> list[RunStats]:
    """Speed-up and efficiency against the run with the fewest processes, when the runs are a scaling
    series: one run per size. Runs that differ in something else at the same size (a sharding sweep with
    one larger variant) are not: a 'speed-up' between two strategies on the same processes says nothing
    about scaling, so the columns stay empty."""
    from dataclasses import replace

    measured = [r.world_size for r in rows if r.tokens_per_s and r.world_size is not None]
    sizes = set(measured)
    if len(sizes) < 2 or len(sizes) != len(measured):
        return rows
    smallest = min(sizes)
    base = next(r.tokens_per_s for r in rows if r.world_size == smallest and r.tokens_per_s)
    out = []
    for r in rows:
        if r.tokens_per_s is None or r.world_size is None:
            out.append(r)
            continue
        speedup = r.tokens_per_s / base
        out.append(replace(r, speedup=speedup, efficiency=speedup / (r.world_size / smallest)))
    return out


def compare_runs(home: Path, run_ids: list[str], labels: dict[str, str] | None = None) -> list[RunStats]:
    """Any runs side by side; each labelled by what its workload sets differently from the others'."""
    if labels is None:
        import yaml

        store = RunStore(home)
        workloads = {}
        for run_id in run_ids:
            record = store.get_run(run_id)
            try:
                workloads[run_id] = (yaml.safe_load((record.directory / "workload.yaml").read_text()) or {}
                                     if record is not None else {})
            except (OSError, AttributeError, yaml.YAMLError):
                workloads[run_id] = {}
        labels = varied_labels(workloads)
    return with_scaling([run_stats(home, run_id, labels.get(run_id, "")) for run_id in run_ids])


def varied_labels(workloads: dict[str, dict]) -> dict[str, str]:
    """``{run: "sharding=no_shard max_steps=20"}``: the keys whose values differ between the runs (their
    last part), with each run's value; empty when all agree or there is one run."""
    flat = {run_id: _flatten(w) for run_id, w in workloads.items()}
    keys = list(dict.fromkeys(k for f in flat.values() for k in f))
    varied = [k for k in keys if len({repr(f.get(k)) for f in flat.values()}) > 1]
    return {run_id: " ".join(f"{k.rsplit('.', 1)[-1]}={f.get(k, '-')}" for k in varied)
            for run_id, f in flat.items()}


def _flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        out.update(_flatten(value, name + ".") if isinstance(value, dict) else {name: value})
    return out


def sweep_stats(home: Path, record) -> list[RunStats]:
    """One row per variant of a sweep record (``SweepRecord``), in its order; a variant not started (or
    skipped) is a row with its state and why, and so is one whose run's record was removed since (its
    figures went with it: the row says so rather than a row of dashes)."""
    store = RunStore(home)
    rows = []
    for v in record.variants:
        if store.get_run(v.run_id) is None:
            gone = v.state not in ("pending", "skipped") and v.run_id
            why = (f"its run's record was removed (fsdp-tui rm {v.run_id}): no figures are left"
                   if gone else v.detail)
            rows.append(RunStats(v.run_id, v.label, v.state, signature=why, num_nodes=None, world_size=None))
        else:
            rows.append(run_stats(home, v.run_id, v.label))
    return with_scaling(rows)
