"""The real ``fsdp-tui`` console script on a recorded run: runs --json, logs by id prefix, unknown ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.events import RunState
from launcher.plan import build_plan
from launcher.store import RunStore
from launcher.validate import validate_file

ROOT = Path(__file__).resolve().parents[2]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FSDP_TUI, *args], env={**os.environ, "FSDP_TUI_HOME": str(home)}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_runs_logs_and_unknown_run(tmp_path):
    store = RunStore(tmp_path)
    plan = build_plan(validate_file(ROOT / "sample_workloads" / "tiny_cpu.yaml").workload, run_id="r-abc123")
    directory = store.create_run(plan, None, "x: 1\n")
    store.set_state("r-abc123", RunState.FAILED, 1)
    (directory / "nodes" / "0.log").write_text("first\nsecond\nthird\n")

    runs = _cli(tmp_path, "runs", "--json")
    assert runs.returncode == 0, runs.stderr
    [row] = json.loads(runs.stdout)
    assert (row["run_id"], row["state"], row["num_nodes"]) == ("r-abc123", "failed", 1)

    tail = _cli(tmp_path, "logs", "r-ab", "--tail", "2")
    assert tail.returncode == 0 and tail.stdout.split() == ["second", "third"]

    missing = _cli(tmp_path, "logs", "zz")
    assert missing.returncode != 0 and "no run 'zz'" in missing.stderr and "Traceback" not in missing.stderr
