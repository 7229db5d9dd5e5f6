"""A recorded CPU sharding sweep (fixed numbers and times, nothing runs): five variants as the sample
has them, one failed with its triage, one skipped; what the sweep view's tests and snapshots show."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.events import RunState
from launcher.runs.sweeps.record import SweepRecord, VariantRecord, save_sweep
from tests.support.tui import T0, RecordedRun, record

SWEEP_ID = "sweep-20260301-0900-sharding-sweep-cpu-5a5a"
# label, state, procs, tokens/s, RSS GiB per rank (rank 0, rank 1), loss offset
VARIANTS = (
    ("sharding=full_shard", RunState.SUCCEEDED, 2, 5200.0, (0.61, 0.60), 0.00),
    ("sharding=shard_grad_op", RunState.SUCCEEDED, 2, 5900.0, (0.64, 0.63), 0.02),
    ("sharding=no_shard", RunState.SUCCEEDED, 2, 6400.0, (0.70, 0.69), 0.04),
    ("sharding=full_shard cpu_offload=true", RunState.FAILED, 2, 2100.0, (0.58, 0.57), 0.06),
    ("sharding=hybrid_shard procs_per_node=4", None, 4, None, (), 0.0),
)
STEPS = 12


def run_id(index: int) -> str:
    return f"20260301-0900-sharding-sweep-cpu-{index:04x}a"


def metrics(tps: float, rss: tuple[float, ...], offset: float) -> list[dict]:
    out = []
    for s in range(1, STEPS + 1):
        out.append({"step": s, "kind": "train", "max_steps": STEPS, "loss": round(5.0 - 0.3 * s + offset * s, 4),
                    "tokens_per_s": tps + 10 * (s % 3), "time": T0 + s * 0.5,
                    "memory": [{"rank": r, "rss_gib": v - 0.01 * (STEPS - s) / STEPS} for r, v in enumerate(rss)]})
    out.append({"step": STEPS, "kind": "eval", "eval_loss": round(2.0 + offset, 4)})
    return out


def record_sweep(home: Path) -> SweepRecord:
    variants = []
    for i, (label, state, procs, tps, rss, offset) in enumerate(VARIANTS, start=1):
        rid = run_id(i)
        variants.append(VariantRecord(i, label, {"parameters.fsdp.sharding": label.split()[0].split("=")[1]},
                                      [label], rid, state.value if state else "skipped",
                                      "" if state else "the sweep was cancelled"))
        if state is None:
            continue
        failed = state == RunState.FAILED
        run = RecordedRun(rid, "sharding-sweep-cpu", state, 1, 60 * i, 30 + i, None, None, STEPS, STEPS)
        directory = record(home, run, created_order=i, metrics=metrics(tps, rss, offset)[: 5 if failed else None])
        (directory / "plan.json").write_text(json.dumps({"nodes": [{}], "workload": {"compute": {"procs_per_node": procs}}}))
        if failed:
            (directory / "triage.json").write_text(json.dumps(
                {"summary": "node 0 rank 1: ValueError: 320 training rows cannot fill one global batch"}))
    sweep = SweepRecord(SWEEP_ID, "sharding-sweep-cpu", "/samples/sharding_sweep_cpu.yaml", [], 1, "continue",
                        variants, state="cancelled", created_at=T0, started_at=T0, ended_at=T0 + 400,
                        detail="3/5 variants succeeded")
    save_sweep(home, sweep)
    return sweep
