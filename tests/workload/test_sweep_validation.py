"""One validation for a sweep: ``validate --json``, the editor's problem list and ``sweep --dry-run``
report the same problems at the same lines, so a file is valid for one exactly when it is for all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.workload.load import plan_file
from launcher.workload.sweep import plan_sweep
from launcher.workload.validate import validate_file
from tests.support.sweep_base import SWEEP_BASE

FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
BASE = SWEEP_BASE + "sweep:\n"

# (the sweep section, the line and key path of the error, words of its message)
CORPUS = {
    "unknown path": ("  grid:\n    parameters.fsdp.shardng: [full_shard, no_shard]\n",
                     10, "parameters.fsdp.shardng", "unknown key 'shardng'"),
    "bad value": ("  grid:\n    parameters.fsdp.sharding: [full_shard, half_shard]\n",
                  10, "parameters.fsdp.sharding", "'half_shard' is not one of"),
    "misspelt variant key": ("  variants:\n    - {parameters.fsdp.sharding: no_shard}\n"
                             "    - {parameters.learning_rat: 0.1}\n",
                             11, "parameters.learning_rat", "unknown key 'learning_rat'"),
    "bad grid shape": ("  grid:\n    parameters.max_steps: 5\n", 10, "sweep.grid.parameters.max_steps",
                       "expected a list"),
    "empty axis": ("  grid:\n    parameters.max_steps: []\n", 10, "sweep.grid.parameters.max_steps",
                   "has no values"),
    "bad in combination": ("  grid:\n    compute.procs_per_node: [2, 3]\n    parameters.max_steps: [2, 3]\n",
                           10, "compute.procs_per_node", "variants 3-4 (compute.procs_per_node=3)"),
}


def _errors(problems) -> list[tuple[int, str, str]]:
    return sorted((p.line, p.path, p.message) for p in problems if p.severity == "error")


@pytest.mark.parametrize("case", list(CORPUS))
def test_validate_the_editor_and_the_sweep_agree(tmp_path, case):
    sweep, line, path, words = CORPUS[case]
    file = tmp_path / "w.yaml"
    file.write_text(BASE + sweep)
    validated = _errors(validate_file(file).problems)
    editor = _errors(plan_file(file, home=tmp_path, text=file.read_text(), run_id="<run-id>").problems)
    swept = _errors(plan_sweep(file, home=tmp_path).problems)
    assert validated == editor == swept
    assert any(got_line == line and got_path == path and words in message
               for got_line, got_path, message in validated), validated


def test_a_bad_value_shared_by_variants_is_said_once(tmp_path):
    file = tmp_path / "w.yaml"
    file.write_text(BASE + "  grid:\n    parameters.fsdp.sharding: [half_shard]\n"
                    "    parameters.max_steps: [2, 3, 4]\n")
    errors = [p for p in validate_file(file).problems if p.is_error]
    assert len(errors) == 1, [p.format() for p in errors]
    assert errors[0].message.startswith("variants 1-3 (parameters.fsdp.sharding=half_shard): ")
    assert "did you mean" in errors[0].format()


def test_a_good_sweep_stays_valid_and_the_cli_says_the_same(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(BASE + "  grid:\n    parameters.fsdp.sharding: [full_shard, no_shard]\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASE + CORPUS["unknown path"][0])
    assert validate_file(good).ok and plan_sweep(good, home=tmp_path).ok
    out = subprocess.run([FSDP_TUI, "validate", "--json", str(good), str(bad)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1, out.stderr
    problems = json.loads(out.stdout)
    assert {Path(p["file"]).name for p in problems if p["severity"] == "error"} == {"bad.yaml"}
    assert [(p["line"], p["path"]) for p in problems if p["severity"] == "error"] == [
        (10, "parameters.fsdp.shardng")]
