"""For the app's tests: recorded runs (local records as the launcher writes them, at fixed times), a run's
events fed by the test, waiting."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from launcher.events import NodeState, RunEvent, RunState

T0 = 1_772_355_600.0
"""2026-03-01 09:00:00 UTC: every recorded time is an offset from it, so screens show fixed times."""


@dataclass(frozen=True)
class RecordedRun:
    run_id: str
    experiment: str
    state: RunState
    num_nodes: int
    start_offset_s: float | None = None
    """Seconds after ``T0`` the run started; ``None`` for a run that never started."""
    duration_s: float | None = None
    last_loss: float | None = None
    best_eval_loss: float | None = None
    step: int | None = None
    max_steps: int | None = None


BROWSER_RUNS = (
    RecordedRun("20260301-0900-llama-sft-a1f3", "llama-sft", RunState.SUCCEEDED, 2, 0, 3723, 1.2345, 1.5,
                100, 100),
    RecordedRun("20260301-1000-bloom-squad-b2c4", "bloom-squad", RunState.FAILED, 1, 3600, 95, 2.5, None,
                40, 100),
    RecordedRun("20260301-1100-llama-sft-c3d5", "llama-sft", RunState.CANCELLED, 4, 7200, 600, 0.9, 1.1,
                50, 200),
    RecordedRun("20260301-1200-tiny-cpu-d4e6", "tiny-cpu", RunState.PENDING, 2),
    RecordedRun("20260301-1300-tiny-cpu-e5f7", "tiny-cpu", RunState.SUCCEEDED, 1, 14400, 45, 10.5, 9.0, 20, 20),
)
"""Five runs whose numbers sort differently as text and as numbers (10.5 vs 2.5), with missing values."""


def workload_text(experiment: str, num_nodes: int) -> str:
    hosts = ", ".join(f"gpu-{chr(ord('a') + i)}" for i in range(num_nodes))
    return (f"experiment_name: {experiment}\n"
            f"compute: {{num_accelerators: {num_nodes}, gpus_per_node: 1, hosts: [{hosts}]}}\n"
            "command: python train.py\n")


def record(home: Path, run: RecordedRun, created_order: int = 0,
           node_lines: dict[int, list[str]] | None = None, metrics: list[dict] | None = None) -> Path:
    """Write ``run`` into the run store under ``home``; returns its record directory."""
    from launcher.runs.core.store import RunStore
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    text = workload_text(run.experiment, run.num_nodes)
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id=run.run_id)
    store = RunStore(home)
    directory = store.create_run(plan, None, text)
    for rank, lines in (node_lines or {}).items():
        (directory / "nodes" / f"{rank}.log").write_text("\n".join(lines) + "\n")
    if metrics:
        (directory / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    if run.start_offset_s is not None:
        store.set_state(run.run_id, RunState.RUNNING, 1)
        for rank in range(run.num_nodes):
            failed = run.state == RunState.FAILED and rank == run.num_nodes - 1
            store.set_node(run.run_id, rank, NodeState.EXITED, 1 if failed else 0)
    if run.state != RunState.PENDING:
        store.set_state(run.run_id, run.state, 1)
    store.record_metric_summary(run.run_id, last_loss=run.last_loss, best_eval_loss=run.best_eval_loss,
                                step=run.step, max_steps=run.max_steps)
    started = None if run.start_offset_s is None else T0 + run.start_offset_s
    ended = None if started is None or run.duration_s is None else started + run.duration_s
    # The store stamps the wall clock; screens must show the same times on every run of the tests.
    db = sqlite3.connect(home / "runs.db")
    with db:
        db.execute("UPDATE runs SET started_at=?, ended_at=?, created_at=? WHERE run_id=?",
                   (started, ended, T0 + created_order, run.run_id))
    db.close()
    if not run.state.is_final:
        _owned_elsewhere(directory)
    return directory


def record_lines(home: Path, run_id: str, lines: dict[int, list[str]], records: list[dict], state: RunState) -> None:
    """A run's local record as the launcher writes it: each node's lines (``lines``: rank -> lines), its metric
    records, and its end in ``state``."""
    from launcher.runs.core.store import RunStore
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    text = "experiment_name: recorded\ncompute: {num_accelerators: 2, gpus_per_node: 1, hosts: [a, b]}\ncommand: x\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id=run_id)
    store = RunStore(home)
    directory = store.create_run(plan, None, text)
    for rank, node_lines in lines.items():
        (directory / "nodes" / f"{rank}.log").write_text("\n".join(node_lines) + "\n")
        store.set_node(run_id, rank, NodeState.EXITED, 0 if rank == 0 else 1)
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    store.set_state(run_id, RunState.RUNNING, 1)
    store.set_state(run_id, state, 1)


_HELD = []


def _owned_elsewhere(directory: Path) -> None:
    """A live run's owner is another process: hold its lock for the rest of the tests, so no screen
    adopts the recorded run (a real app would: it has no supervisor)."""
    from launcher.runs.core.ownership import OwnerLock

    lock = OwnerLock(directory)
    assert lock.acquire()
    _HELD.append(lock)


def record_all(home: Path, runs: tuple[RecordedRun, ...] = BROWSER_RUNS) -> None:
    for order, run in enumerate(runs):
        record(home, run, created_order=order)


async def wait_for(pilot, predicate, timeout: float = 30.0) -> None:
    """Let the app run until ``predicate()`` holds; fail after ``timeout`` seconds."""
    import asyncio

    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, "condition not reached in time"
        await pilot.pause(0.05)


class FedEvents:
    """A run's events as a test feeds them to the run monitor (``RunMonitorScreen(..., events=fed)``):
    ``first`` at once, then each event the test puts (``put``), in order. The stream stays open, as a live
    run's does, unless ``more=False`` (then it ends after ``first``)."""

    def __init__(self, first: Iterable[RunEvent] = (), *, more: bool = True) -> None:
        self.first, self.more = list(first), more
        self.queue: asyncio.Queue[RunEvent] = asyncio.Queue()

    def put(self, *events: RunEvent) -> None:
        for event in events:
            self.queue.put_nowait(event)

    async def __aiter__(self) -> AsyncIterator[RunEvent]:
        for event in self.first:
            yield event
        while self.more:
            yield await self.queue.get()
