"""The run store made again from the run folders (``fsdp-tui repair``).

``runs.db`` is an index: every run's folder holds what the index says about it (the plan or the
resolved workload, ``events.jsonl`` with each state change and when it was written, the node states,
the metrics). A damaged index is moved aside whole (with its ``-wal`` and ``-shm`` files), never deleted,
and a new one is written from the folders; a folder that cannot be read is named and left as it is.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from launcher.events import NodeState, RunState
from launcher.runs.core.layout import (
    EVENTS,
    LOG_METRICS,
    METRICS,
    PLAN,
    load_plan,
    read_json_lines,
    read_records,
)
from launcher.runs.core.store import NodeRecord, RunStore, RunSummary, StoreDamaged
from launcher.words import plural

STORE_FILES = ("runs.db", "runs.db-wal", "runs.db-shm")


@dataclass
class RebuildReport:
    moved_to: Path | None
    """Where the damaged store went (``None``: there was none to move)."""
    rebuilt: list[str] = field(default_factory=list)
    """The runs indexed again."""
    skipped: list[str] = field(default_factory=list)
    """Folders that are not runs, each with why (they are left untouched)."""
    states: dict[str, int] = field(default_factory=dict)
    """How many rebuilt runs are in each state."""

    def lines(self) -> list[str]:
        out = []
        if self.moved_to is not None:
            out.append(f"moved the damaged store aside: {self.moved_to}")
        counts = ", ".join(f"{n} {state}" for state, n in sorted(self.states.items()))
        out.append(f"rebuilt the store from {plural(len(self.rebuilt), 'run folder')}" + (f": {counts}" if counts else ""))
        out += [f"skipped {why}" for why in self.skipped]
        return out


def check_store(home: Path) -> str | None:
    """What is wrong with ``home/runs.db`` (SQLite's own words), or ``None`` when it is sound or absent."""
    path = Path(home) / "runs.db"
    if not path.exists():
        return None
    try:
        RunStore(home)
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            problems = [r[0] for r in db.execute("PRAGMA integrity_check").fetchall()]
        finally:
            db.close()
    except StoreDamaged as err:
        return str(err.error)
    except sqlite3.DatabaseError as err:
        return str(err)
    return None if problems == ["ok"] else "; ".join(problems[:3])


REBUILD_BATCH = 500
"""Runs indexed per transaction when the store is rebuilt (one commit each would take minutes at 100,000)."""


def rebuild_store(home: Path) -> RebuildReport:
    """Move ``runs.db`` aside (if any) and index every run folder again."""
    home = Path(home)
    moved = _move_aside(home)
    store = RunStore(home)
    report = RebuildReport(moved)
    root = home / "runs"
    batch: list = []
    for directory in sorted(root.iterdir()) if root.is_dir() else []:
        if not directory.is_dir():
            continue
        try:
            batch.append(read_run(directory))
        except (OSError, ValueError, KeyError, TypeError) as err:
            report.skipped.append(f"{directory}: {err}")
            continue
        summary = batch[-1][0]
        report.rebuilt.append(summary.run_id)
        report.states[summary.state.value] = report.states.get(summary.state.value, 0) + 1
        if len(batch) >= REBUILD_BATCH:
            store.restore_runs(batch)
            batch = []
    store.restore_runs(batch)
    return report


def _move_aside(home: Path) -> Path | None:
    if not (home / "runs.db").exists():
        return None
    target = home / f"runs.db.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    target.mkdir()
    for name in STORE_FILES:
        if (home / name).exists():
            os.replace(home / name, target / name)
    return target


def read_run(directory: Path) -> tuple[RunSummary, list[tuple[float, RunState, int, str]], list[NodeRecord], float]:
    """One run's index rows from its folder: summary, state changes, nodes, and when it was created."""
    run_id = directory.name
    experiment, hosts, node_dirs, params, source = _identity(directory)
    transitions, node_states, finished = _events(directory)
    created = transitions[0][0] if transitions else _created_at(run_id, directory)
    if transitions:
        state, attempt, detail = transitions[-1][1], transitions[-1][2], transitions[-1][3]
    else:
        state, attempt, detail = RunState.FAILED, 1, "no state change was recorded in its folder"
        transitions = [(created, state, attempt, detail)]
    if finished is not None and finished != state:
        state = finished
        transitions.append((transitions[-1][0], state, attempt, ""))
    started = next((at for at, s, _a, _d in transitions if s == RunState.RUNNING), None)
    ended = transitions[-1][0] if state.is_final else None
    nodes = []
    for rank, host in enumerate(hosts):
        st, code, why = node_states.get(rank, (NodeState.PENDING, None, ""))
        nodes.append(NodeRecord(rank, host, node_dirs[rank] if rank < len(node_dirs) else "", st, code, why))
    records = read_records(directory / METRICS) or read_records(directory / LOG_METRICS)
    train = [r for r in records if r.kind == "train" and r.loss is not None]
    evals = [r.eval_loss for r in records if r.eval_loss is not None]
    max_steps = next((r.max_steps for r in reversed(records) if r.max_steps), None) or params.get("max_steps")
    summary = RunSummary(
        run_id=run_id, experiment=experiment, state=state, attempt=attempt, num_nodes=len(hosts),
        hosts=tuple(hosts), started_at=started, ended_at=ended, last_loss=train[-1].loss if train else None,
        best_eval_loss=min(evals) if evals else None, step=max((r.step for r in records), default=None),
        max_steps=max_steps if isinstance(max_steps, int) else None, workload_path=source,
        output_dir=params.get("output_dir") if isinstance(params.get("output_dir"), str) else None, detail=detail)
    return summary, transitions, nodes, created


def _identity(directory: Path) -> tuple[str, list[str], list[str], dict, str | None]:
    """Experiment, node hosts, node folders, parameters and workload file: from the plan, else the workload."""
    if (directory / PLAN).exists():
        plan = load_plan(directory)
        return (plan.workload.experiment_name, [n.host_display for n in plan.nodes],
                [n.node_dir for n in plan.nodes], dict(plan.workload.parameters or {}),
                str(plan.source_file) if plan.source_file else None)
    workload = directory / "workload.yaml"
    if not workload.exists():
        raise ValueError(f"neither {PLAN} nor workload.yaml is there: not a run folder")
    data = yaml.safe_load(workload.read_text()) or {}
    hosts = [h if isinstance(h, str) else str(h) for h in (data.get("compute") or {}).get("hosts") or ["localhost"]]
    return str(data["experiment_name"]), hosts, [], dict(data.get("parameters") or {}), None


def _events(directory: Path) -> tuple[list[tuple[float, RunState, int, str]],
                                       dict[int, tuple[NodeState, int | None, str]], RunState | None]:
    path = directory / EVENTS
    if not path.exists():
        return [], {}, None
    fallback = path.stat().st_mtime
    transitions: list[tuple[float, RunState, int, str]] = []
    nodes: dict[int, tuple[NodeState, int | None, str]] = {}
    finished = None
    for data in read_json_lines(path):  # a torn last line (the writer died mid-line) is left out
        if not isinstance(data, dict):
            continue
        try:
            kind = data.get("type")
            at = float(data.get("at") or fallback)
            if kind == "RunStateChanged":
                transitions.append((at, RunState(data["state"]), int(data["attempt"]), data.get("detail") or ""))
            elif kind == "NodeStateChanged":
                nodes[int(data["node_rank"])] = (NodeState(data["state"]), data.get("exit_code"),
                                                 data.get("detail") or "")
            elif kind == "RunFinished":
                finished = RunState(data["state"])
        except (ValueError, KeyError, TypeError):
            continue  # a line that is no event: the lines around it stand
    return transitions, nodes, finished


def _created_at(run_id: str, directory: Path) -> float:
    """The time in the run's id (``20261122-113005-...``, local time), else the folder's."""
    try:
        return time.mktime(time.strptime(run_id[:15], "%Y%m%d-%H%M%S"))
    except ValueError:
        return directory.stat().st_mtime
