"""Which lost nodes a command tries to sweep: finished runs' lost nodes, not yet swept, not tried just now; and
what it tells the user once of each."""

from __future__ import annotations

import json

from launcher.events import NodeState, RunState
from launcher.runs.core.housekeeping import SWEPT
from launcher.runs.core.store import RunStore
from launcher.runs.leftovers import RETRY_S, NodeReaped, SweepFailed, due
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_file
from tests.support.cli import ROOT


def test_lost_nodes_are_due_until_swept_and_not_retried_at_once(tmp_path):
    assert due(tmp_path) == [] and not (tmp_path / "runs.db").exists()
    store = RunStore(tmp_path)
    plan = build_plan(validate_file(ROOT / "sample_workloads" / "tiny_cpu.yaml").workload, run_id="r-lost")
    directory = store.create_run(plan, None, "x: 1\n")
    store.set_state("r-lost", RunState.FAILED, 1, "node 0: lost")
    assert due(tmp_path) == []
    store.set_node("r-lost", 0, NodeState.LOST, detail="lost: no connection for 120 s")
    assert due(tmp_path, now=1000.0) == [("r-lost", directory, [0])]

    (directory / SWEPT).write_text(json.dumps({"0": {"tried_at": 1000.0}}))
    assert due(tmp_path, now=1000.0 + RETRY_S / 2) == []
    assert due(tmp_path, now=1000.0 + RETRY_S) == [("r-lost", directory, [0])]
    (directory / SWEPT).write_text(json.dumps({"0": {"tried_at": 1000.0, "done": True}}))
    assert due(tmp_path, now=5000.0) == []


def test_a_node_back_and_a_run_not_swept_are_each_one_line():
    reaped = NodeReaped("r1", "node 1 (gpu-b)", "it is back; nothing of the run was running there")
    assert reaped.line() == ("run r1, node 1 (gpu-b) (lost during the run): it is back; nothing of the run was "
                             "running there")
    assert SweepFailed("r1", "OSError: no plan").line() == "run r1: could not sweep its lost nodes: OSError: no plan"
