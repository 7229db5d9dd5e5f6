"""The run store under two real processes: a writer (the launcher) and a reader (the CLI) at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launcher.events import RunState
from launcher.paths import new_run_id
from launcher.runs.core.store import RunStore
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_file

ROOT = Path(__file__).resolve().parents[3]

WRITER = """
import sys
from pathlib import Path
from launcher.events import RunState
from launcher.runs.core.store import RunStore
store = RunStore(Path(sys.argv[1]))
run_id = sys.argv[2]
store.set_state(run_id, RunState.RUNNING, 1)
for step in range(1, 301):
    store.record_metric_summary(run_id, last_loss=1.0 / step, step=step)
    store.save_offset(run_id, 0, "log", step * 10)
store.set_state(run_id, RunState.SUCCEEDED, 1)
"""


def _plan(run_id: str):
    result = validate_file(ROOT / "sample_workloads" / "tiny_cpu.yaml")
    assert result.workload is not None, result.problems
    return build_plan(result.workload, run_id=run_id)


def test_writer_and_reader_processes_share_the_store(tmp_path):
    store = RunStore(tmp_path)
    run_id = new_run_id("tiny")
    store.create_run(_plan(run_id), None, "experiment_name: tiny\n")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), run_id], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True)
    seen_steps = []
    while writer.poll() is None:
        runs = store.list_runs()
        assert [r.run_id for r in runs] == [run_id]
        seen_steps.append(runs[0].step or 0)
    assert writer.returncode == 0, writer.stderr.read()
    assert seen_steps == sorted(seen_steps)
    record = store.get_run(run_id)
    assert record is not None
    assert record.summary.state == RunState.SUCCEEDED and record.summary.step == 300
    assert record.offsets[(0, "log")] == 3000
    assert store.active_runs() == []
    assert store.find(run_id[:len(run_id) - 2]) == run_id


def test_delete_refuses_an_active_run(tmp_path):
    store = RunStore(tmp_path)
    run_id = new_run_id("tiny")
    store.create_run(_plan(run_id), None, "")
    store.set_state(run_id, RunState.RUNNING, 1)
    with pytest.raises(Exception, match=run_id):
        store.delete_run(run_id)
    store.set_state(run_id, RunState.FAILED, 1)
    store.delete_run(run_id)
    assert store.get_run(run_id) is None


def test_a_reader_never_sees_a_final_state_without_its_end_time(tmp_path):
    """Each statement of the writer is checked from another connection as it runs: the state and its
    ``ended_at`` (and ``started_at``) change in one commit, never one after the other."""
    store = RunStore(tmp_path)
    run_id = new_run_id("tiny")
    store.create_run(_plan(run_id), None, "")
    seen = []

    def look(statement: str) -> None:
        reader = RunStore(tmp_path)  # its own connection, as another process reads the store
        summary = reader.get_run(run_id).summary
        seen.append((statement, summary.state, summary.started_at, summary.ended_at))

    store._db().set_trace_callback(look)
    store.set_state(run_id, RunState.RUNNING, 1)
    store.set_state(run_id, RunState.SUCCEEDED, 1)
    store._db().set_trace_callback(None)
    assert len(seen) >= 4, seen
    for statement, state, started_at, ended_at in seen:
        assert (ended_at is not None) == state.is_final, (statement, state, ended_at)
        assert (started_at is not None) == (state != RunState.PENDING), (statement, state, started_at)
    summary = store.get_run(run_id).summary
    assert summary.ended_at >= summary.started_at
