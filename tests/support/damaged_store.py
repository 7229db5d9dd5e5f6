"""For the tests of a damaged run store: runs recorded as their owner records them (the real recorder, no job
needed), and the store's file damaged as a crash or a disk leaves it."""

from __future__ import annotations

import gc
import os
import sqlite3
from pathlib import Path

from launcher.events import NodeState, RunState
from launcher.runs.core.store import RunStore
from launcher.runs.core.triage import TriageReport
from launcher.runs.launch import create_run
from launcher.runs.owner.recorder import Recorder
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text

TWO_NODES = """experiment_name: {name}
compute: {{hosts: [localhost, localhost]}}
mlflow: {{enabled: false}}
command: echo hi
parameters: {{max_steps: 8, output_dir: /tmp/out}}
"""


def record_run(home: Path, run_id: str, name: str, *, fail: bool) -> None:
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


def damage(path: Path, how: str) -> None:
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
