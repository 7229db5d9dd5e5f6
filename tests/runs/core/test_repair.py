"""A damaged run store: named with the file and the way out (in process and through the real CLI), and
rebuilt by ``repair`` from the run folders as the owner wrote them (the real recorder, no job needed)."""

from __future__ import annotations

import gc
import json
import os
import sqlite3
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

from launcher.events import NodeState, RunState
from launcher.runs.core.rebuild import check_store, read_run, rebuild_store
from launcher.runs.core.store import RunStore, StoreDamaged
from launcher.runs.core.triage import TriageReport
from launcher.runs.launch import create_run
from launcher.runs.owner.recorder import Recorder
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from tests.support.cli import FSDP_TUI, ROOT, cli_env

TWO_NODES = """experiment_name: {name}
compute: {{hosts: [localhost, localhost]}}
mlflow: {{enabled: false}}
command: echo hi
parameters: {{max_steps: 8, output_dir: /tmp/out}}
"""


def _record(home: Path, run_id: str, name: str, *, fail: bool) -> None:
    """A run recorded as its owner records one: created, started, logs, metrics, nodes, end."""
    plan = build_plan(validate_text(TWO_NODES.format(name=name), "w.yaml").workload, run_id=run_id)
    create_run(plan, home)
    store = RunStore(home)
    rec = Recorder(store, run_id, {n.node_rank: n.host_display for n in plan.nodes}, parse_logs=None)
    rec.set_state(RunState.STARTING)
    for rank in (0, 1):
        rec.set_node(rank, NodeState.RUNNING)
        rec.append_log(rank, f"node {rank} says hello\nsecond line of {rank}\n".encode())
    rec.set_state(RunState.RUNNING)
    rec.append_metrics(b'{"step": 1, "kind": "train", "max_steps": 8, "loss": 2.5}\n'
                       b'{"step": 2, "kind": "eval", "max_steps": 8, "eval_loss": 2.25}\n'
                       b'{"step": 3, "kind": "train", "max_steps": 8, "loss": 2.0}\n')
    if fail:
        rec.set_node(1, NodeState.EXITED, 3, "exit code 3")
        rec.set_node(0, NodeState.STOPPED)
        rec.set_state(RunState.RETRYING, "attempt 2 of 2")
        rec.attempt = 2
        rec.set_state(RunState.RUNNING)
        rec.finished(RunState.FAILED, 3, TriageReport(node_rank=1, exit_code=3))
    else:
        for rank in (0, 1):
            rec.set_node(rank, NodeState.EXITED, 0)
        rec.finished(RunState.SUCCEEDED, 0, None)


@pytest.fixture
def recorded(tmp_path) -> Path:
    home = tmp_path / "home"
    _record(home, "20260301-090000-good-aaaa", "good", fail=False)
    _record(home, "20260301-100000-bad-bbbb", "bad", fail=True)
    (home / "runs" / "stray").mkdir()
    return home


def _damage(path: Path, how: str) -> None:
    """``how`` done to the file once every write is in it (as when no process has it open)."""
    gc.collect()
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[:len(data) // 2]
    elif how == "garbage-headed":
        data[:8192] = os.urandom(8192)
    elif how == "page-corrupted":
        data[4096:8192] = b"\xab" * 4096  # page 2: a table's root, read by every listing
    path.write_bytes(bytes(data))


def _snapshot(store: RunStore) -> list:
    out = []
    for summary in store.list_runs():
        record = store.get_run(summary.run_id)
        out.append((summary, [t[1:] for t in record.transitions], record.nodes))
    return out


@pytest.mark.parametrize("how", ["truncated", "garbage-headed", "page-corrupted"])
def test_a_damaged_store_is_named_and_rebuilt_from_the_run_folders(recorded, how):
    home = recorded
    live = "20260301-110000-live-cccc"
    _record(home, live, "live", fail=False)
    RunStore(home).set_state(live, RunState.RUNNING, 1)  # said by the index alone: not in the folder
    (home / "runs" / live / "events.jsonl").unlink()
    before = _snapshot(RunStore(home))
    _damage(home / "runs.db", how)
    with pytest.raises(StoreDamaged) as caught:
        RunStore(home).list_runs()
    said = str(caught.value)
    assert str(home / "runs.db") in said and "fsdp-tui repair" in said and str(home / "runs") in said
    assert check_store(home) is not None

    report = rebuild_store(home)
    after = _snapshot(RunStore(home))
    assert [a for a in after if a[0].run_id != live] == [b for b in before if b[0].run_id != live]
    assert {r.run_id: r.state for r in RunStore(home).list_runs()}[live] == RunState.FAILED  # nothing said it ran
    assert sorted(report.rebuilt) == sorted(r[0].run_id for r in before)
    assert report.moved_to is not None and (report.moved_to / "runs.db").exists()
    assert [line for line in report.skipped if "stray" in line]
    assert check_store(home) is None
    good = RunStore(home).get_run("20260301-090000-good-aaaa").summary
    assert (good.step, good.last_loss, good.best_eval_loss, good.max_steps) == (3, 2.0, 2.25, 8)


def test_a_foreign_database_is_named_and_never_written_into(tmp_path):
    db = sqlite3.connect(tmp_path / "runs.db")
    db.execute("CREATE TABLE photos (name TEXT)")
    db.commit()
    db.close()
    before = (tmp_path / "runs.db").read_bytes()
    with pytest.raises(StoreDamaged, match="not a run store"):
        RunStore(tmp_path)
    assert (tmp_path / "runs.db").read_bytes() == before


def test_opening_the_store_to_read_writes_nothing(recorded):
    path = recorded / "runs.db"
    RunStore(recorded).list_runs()  # a first open settles the WAL files
    stat = path.stat()
    data = path.read_bytes()
    store = RunStore(recorded)
    store.list_runs()
    store.get_run("20260301-090000-good-aaaa")
    assert path.read_bytes() == data and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_a_torn_last_event_and_a_folder_with_only_its_workload_are_read(tmp_path):
    folder = tmp_path / "runs" / "20260302-080000-old-dddd"
    folder.mkdir(parents=True)
    (folder / "workload.yaml").write_text("experiment_name: old\ncompute: {hosts: [a, b]}\n")
    (folder / "events.jsonl").write_text(
        '{"type": "RunStateChanged", "run_id": "x", "state": "running", "attempt": 1, "detail": "", "at": 5.0}\n'
        '{"type": "NodeStateChanged", "run_id": "x", "node_rank": 1, "host": "b", "state": "lost", '
        '"exit_code": null, "detail": "no connection", "at": 6.0}\n'
        '{"type": "RunStateChanged", "run_id": "x", "state": "failed", "attempt": 1, "detail": "lost", "at": 7.0}\n'
        '{"type": "RunStateChanged", "run_id": "x", "sta')
    summary, transitions, nodes, created = read_run(folder)
    assert (summary.experiment, summary.state, summary.detail, summary.hosts) == ("old", RunState.FAILED, "lost",
                                                                                 ("a", "b"))
    assert (summary.started_at, summary.ended_at, created, len(transitions)) == (5.0, 7.0, 5.0, 2)
    assert (nodes[1].state, nodes[1].detail, nodes[0].state) == (NodeState.LOST, "no connection", NodeState.PENDING)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FSDP_TUI, *args], capture_output=True, text=True, timeout=120, env=cli_env(home),
                          cwd=ROOT)


def test_the_cli_names_the_damage_and_repair_gives_back_every_run(recorded):
    home = recorded
    before = json.loads(json.dumps([asdict(r) for r in RunStore(home).list_runs()]))
    _damage(home / "runs.db", "page-corrupted")
    for args in (("runs",), ("logs", "aaaa")):
        out = _cli(home, *args)
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert f"the run store {home / 'runs.db'} is damaged" in out.stderr and "fsdp-tui repair" in out.stderr
    fixed = _cli(home, "repair")
    assert fixed.returncode == 0, fixed.stderr
    assert "rebuilt the store from 2 run folders: 1 failed, 1 succeeded" in fixed.stdout
    assert f"skipped {home / 'runs' / 'stray'}" in fixed.stdout
    listed = json.loads(_cli(home, "runs", "--json").stdout)
    assert [{k: v for k, v in r.items() if k not in ("duration_s", "usage", "resume_check", "kind", "trained_nothing", "continued")}
            for r in listed] == before
    logs = _cli(home, "logs", "aaaa")
    assert logs.stdout.splitlines() == ["[node 0] node 0 says hello", "[node 0] second line of 0",
                                        "[node 1] node 1 says hello", "[node 1] second line of 1"]
