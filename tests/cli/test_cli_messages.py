"""What run, sweep and relaunch say before launching anything: the sweep run leaves out, old -> new for
every --set, and exit 2 for a workload that cannot be launched as written (1 is for a run that failed)."""

from __future__ import annotations

import subprocess

from tests.support.cli import ROOT, cli, write_workload

SWEEP = ROOT / "sample_workloads" / "sharding_sweep_cpu.yaml"


def test_run_of_a_sweep_file_launches_it_as_written_and_says_how_to_sweep(home):
    out = cli(home, "run", SWEEP, "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\nnode 0:") == 1  # one plan: the file as written
    assert f"fsdp-tui sweep {SWEEP} runs every variant" in out.stderr


def test_invalid_or_missing_workloads_exit_2_and_say_what_to_do(home, tmp_path):
    bad = write_workload(tmp_path, "experiment_name: x\ncommand: echo hi\nmax_retries: many\n")
    out = cli(home, "run", bad, "--watch")
    assert out.returncode == 2 and "max_retries" in out.stderr and f"fsdp-tui validate {bad}" in out.stderr
    missing = cli(home, "run", tmp_path / "nope.yaml", "--watch")
    assert missing.returncode == 2 and "no such file (check the path)" in missing.stderr
    assert "validate" not in missing.stderr and "Traceback" not in missing.stderr
    swept = cli(home, "sweep", bad, "--dry-run")
    assert swept.returncode == 2


def test_sweep_and_relaunch_print_old_and_new_for_every_set(home):
    from launcher.events import RunState
    from tests.support.tui import RecordedRun, record

    out = cli(home, "sweep", SWEEP, "--set", "parameters.max_steps=3", "--dry-run")
    assert out.returncode == 0 and "--set parameters.max_steps: 8 -> 3" in out.stderr, out.stderr
    record(home, RecordedRun("20260301-0900-old-a1f3", "old", RunState.SUCCEEDED, 1, 0, 60))
    again = cli(home, "relaunch", "20260301-0900-old-a1f3", "--set", "command=echo again", "--set", "max_retries=x")
    assert "--set command: python train.py -> echo again" in again.stderr, again.stderr
    assert again.returncode == 2 and "max_retries" in again.stderr  # nothing launched
    assert "started" not in again.stderr


def test_show_rounds_losses_and_rm_says_what_stays_and_files_removes_the_runs_folder_here(home):
    from launcher.events import RunState
    from tests.support.tui import RecordedRun, record

    kept, gone = "20260301-0900-kept-a1f3", "20260301-1000-gone-b2c4"
    for run_id in (kept, gone):
        record(home, RecordedRun(run_id, "x", RunState.SUCCEEDED, 1, 0, 60, 1.23456789, None, 20, 20))
        outputs = home / "nodes" / run_id / "node-0" / "outputs"
        outputs.mkdir(parents=True)
        (outputs / "model.safetensors").write_bytes(b"\0" * (3 << 20))
    assert "step 20/20  loss 1.2346  best eval -" in cli(home, "show", kept).stdout
    out = cli(home, "rm", kept)
    assert out.returncode == 0 and f"deleted {kept}" in out.stdout
    # What rm says of the files that stay works once the record is gone: a command that needs no record.
    here = home / "nodes" / kept
    assert f"remove them: rm -r {here}" in out.stderr and "(3.0 MiB" in out.stderr
    assert f"fsdp-tui rm --files {kept}" not in out.stderr
    assert "node 0 (gpu-a) stay there" in out.stderr  # the recorded run ran on a host elsewhere
    assert here.is_dir()
    again = cli(home, "rm", "--files", kept)
    assert again.returncode == 2 and f"no run '{kept}'" in again.stderr  # what the old advice led to
    subprocess.run(["rm", "-r", str(here)], check=True)  # the advice given, followed
    assert not here.exists()
    out = cli(home, "rm", "--files", gone)
    assert out.returncode == 0 and f"deleted {gone}" in out.stdout, out.stderr
    assert f"this machine: removed {home / 'nodes' / gone} (3.0 MiB, 1 file)" in out.stdout
    assert not (home / "nodes" / gone).exists()


def test_runs_keeps_both_ends_of_a_long_reason(home):
    from launcher.cli.runs import WHY_WIDTH, shorten
    from launcher.events import RunState
    from launcher.runs.core.store import RunStore
    from tests.support.tui import RecordedRun, record

    why = ("node 0 rank 1: python_error, exit code 1: [rank1]: FileNotFoundError: Couldn't find any data file "
           "at /data/team/sft/train-2026-11.jsonl.")
    record(home, RecordedRun("20260301-0900-far-a1f3", "far", RunState.FAILED, 1, 0, 60))
    RunStore(home).set_state("20260301-0900-far-a1f3", RunState.FAILED, 1, why)
    line = cli(home, "runs").stdout.splitlines()[1]
    assert line.endswith("/data/team/sft/train-2026-11.jsonl.")  # the file's name, not cut off before it
    assert "node 0 rank 1: python_error" in line and " … " in line
    assert len(shorten(why)) <= WHY_WIDTH and shorten("short") == "short"
