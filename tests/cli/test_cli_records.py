"""The real ``fsdp-tui`` console script on a recorded run: runs --json, logs by id prefix, unknown ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.events import RunState
from launcher.runs.core.store import RunStore
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_file

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
    none = _cli(tmp_path, "logs", "r-ab", "--tail", "0")
    assert none.returncode == 0 and none.stdout == ""
    more = _cli(tmp_path, "logs", "r-ab", "--tail", "9")
    assert more.returncode == 0 and more.stdout.split() == ["first", "second", "third"]

    missing = _cli(tmp_path, "logs", "zz")
    assert missing.returncode != 0 and "no run 'zz'" in missing.stderr and "Traceback" not in missing.stderr


def _recorded(home: Path, run_id: str, state: RunState, detail: str = "") -> Path:
    store = RunStore(home)
    plan = build_plan(validate_file(ROOT / "sample_workloads" / "tiny_cpu.yaml").workload, run_id=run_id)
    directory = store.create_run(plan, None, "x: 1\n")
    store.set_state(run_id, state, 1, detail)
    return directory


def test_show_filters_rm_version_and_a_closed_pipe(tmp_path):
    _recorded(tmp_path, "20260301-0900-a-1111", RunState.SUCCEEDED)
    _recorded(tmp_path, "20260301-1000-b-2222", RunState.FAILED,
              "node 1 (gpu-b): lost: no connection for 120 s (Connection refused); check the host and the network")
    show = _cli(tmp_path, "show", "2222")  # the short id the app shows
    assert show.returncode == 0, show.stderr
    assert "state     failed: node 1 (gpu-b): lost: no connection for 120 s" in show.stdout
    assert "fsdp-tui relaunch 20260301-1000-b-2222" in show.stdout
    listed = _cli(tmp_path, "runs", "--state", "failed")
    assert "20260301-1000-b-2222" in listed.stdout and "1111" not in listed.stdout
    assert "lost: no connection for 120 s" in listed.stdout
    assert len(json.loads(_cli(tmp_path, "runs", "--limit", "1", "--json").stdout)) == 1
    piped = subprocess.run(f"{FSDP_TUI} runs | head -1", shell=True, capture_output=True, text=True,
                           env={**os.environ, "FSDP_TUI_HOME": str(tmp_path)}, cwd=ROOT)
    assert piped.returncode == 0 and "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr
    assert _cli(tmp_path, "--version").stdout.startswith("fsdp-tui ")
    gone = _cli(tmp_path, "rm", "1111")
    assert gone.returncode == 0 and "deleted 20260301-0900-a-1111" in gone.stdout
    assert _cli(tmp_path, "show", "1111").returncode == 2


def test_secrets_rm_of_a_missing_key_says_so(tmp_path):
    out = _cli(tmp_path, "secrets", "rm", "team/nothing")
    assert out.returncode == 1 and "was not stored" in out.stderr


def test_dry_run_paths_expand_when_pasted(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("experiment_name: paths\ncompute: {hosts: [gpu-a]}\ncommand: x\n"
                  "ssh: {remote_root: '~/my runs'}\n")
    out = _cli(tmp_path, "run", str(wl), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "  directory: ~/'my runs/runs/" in out.stdout
    assert "HYPERPARAMETERS_PATH=~/'my runs/runs/" in out.stdout and "'~/" not in out.stdout


def test_run_detach_starts_the_run_and_returns_its_id(tmp_path):
    from tui.cli import _HEADLESS_RUN_FLAGS

    assert "--detach" in _HEADLESS_RUN_FLAGS  # in a terminal too: no app
    wl = tmp_path / "wl.yaml"
    wl.write_text("experiment_name: detached\nmlflow: {enabled: false}\ncommand: echo from the detached run\n")
    home = tmp_path / "home"
    started = _cli(home, "run", str(wl), "--detach")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    assert f"run {run_id} started; follow it: fsdp-tui logs {run_id} --follow" in started.stderr
    followed = _cli(home, "logs", run_id, "--follow")
    assert followed.returncode == 0 and followed.stdout == "from the detached run\n"
