"""A data dir of many ended runs, written through the run store's own API (:meth:`RunStore.restore_runs`,
what ``fsdp-tui repair`` writes), with a folder per run: the store at the size a team's data dir reaches
(sweeps, probes, nettests), for the scale test and the store's benchmark."""

from __future__ import annotations

from pathlib import Path

from launcher.events import NodeState, RunState
from launcher.runs.core.store import NodeRecord, RunStore, RunSummary

T0 = 1_780_000_000.0
STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.SUCCEEDED, RunState.TIMED_OUT)
BATCH = 5_000


def run_id(i: int) -> str:
    """The ``i``-th run's id, in the shape :func:`launcher.paths.new_run_id` gives (date, time, experiment,
    a tail), one minute apart."""
    return f"20260601-{i // 60 % 24:02d}{i % 60:02d}00-sweep-{i % 7}-{i:05x}"


def fill(home: Path, start: int, stop: int, folders: str = "ends") -> None:
    """Runs ``start``..``stop`` as their owners leave them: a state change per stage, two nodes, a
    summary; every other one with an ``output_dir``. ``folders``: ``all`` makes each run's folder,
    ``ends`` only the first's and the last's."""
    store = RunStore(home)
    rows = []
    for i in range(start, stop):
        state = STATES[i % len(STATES)]
        at = T0 + i * 60
        summary = RunSummary(run_id(i), f"sweep-{i % 7}", state, 1, 2, ("gpu-a", "gpu-b"), at + 5, at + 50,
                             2.0 - i / 1e6, 2.1, 100, 100, None, f"/ckpt/exp-{i % 3}/" if i % 2 else None)
        transitions = [(at, RunState.PENDING, 1, ""), (at + 5, RunState.RUNNING, 1, ""),
                       (at + 50, state, 1, "" if state == RunState.SUCCEEDED else f"why {i}")]
        nodes = [NodeRecord(r, f"gpu-{'ab'[r]}", f"/runs/{run_id(i)}", NodeState.EXITED, 0, "") for r in (0, 1)]
        rows.append((summary, transitions, nodes, at))
        if len(rows) == BATCH:
            store.restore_runs(rows)
            rows = []
    store.restore_runs(rows)
    for i in range(start, stop) if folders == "all" else (start, stop - 1):
        (home / "runs" / run_id(i)).mkdir(parents=True, exist_ok=True)
