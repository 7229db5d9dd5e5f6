"""compute.slurm without a cluster: validation, time limits, #SBATCH lines, the batch script (against a
golden file), squeue's answers and how a node's status is judged from them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from launcher.backends.base import NodeStatus
from launcher.backends.slurm.queue import parse_squeue
from launcher.backends.slurm.script import slurm_dry_run
from launcher.backends.slurm.verdict import judge
from launcher.present.dry_run import dry_run_text
from launcher.workload.slurm import sbatch_line_problem, time_minutes
from launcher.workload.validate import validate_text
from tests.support.slurm_workload import WORKLOAD, slurm_plan

GOLDEN = Path(__file__).with_name("golden") / "slurm_dry_run.txt"


def test_the_dry_run_shows_the_exact_batch_script(request):
    text = dry_run_text(slurm_dry_run(slurm_plan(), "/shared/alice/venv/bin/python"))
    if request.config.getoption("--snapshot-update", default=False):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert "HF_TOKEN=******" in text and "#SBATCH --gpus-per-node=8" in text and "#SBATCH --nodes=2" in text


@pytest.mark.parametrize("text,minutes", [("30", 30), (90, 90), ("10:30", 10.5), ("04:00:00", 240),
                                          ("1-00", 1440), ("1-2:30", 1590), ("2-0:0:30", 2880.5)])
def test_slurm_time_limits_read_as_slurm_does(text, minutes):
    assert time_minutes(text) == pytest.approx(minutes)


@pytest.mark.parametrize("text", ["1h", "1-2:3:4:5", "", "0", "-5", "12:aa"])
def test_a_time_limit_slurm_would_refuse_is_named(text):
    with pytest.raises(ValueError, match="SLURM time limit|no time"):
        time_minutes(text)


@pytest.mark.parametrize("line,problem", [
    ("--mail-type=END", None), ("#SBATCH --mail-type=END", None), ("--gres=gpu:a100:8", None), ("-C a100", None),
    ("--nodes=3", "set by fsdp-tui"), ("#SBATCH -o out.txt", "set by fsdp-tui"), ("--signal=USR1@60", "set by"),
    ("--comment=$(rm -rf ~)", "shell characters"), ("--x=a; echo hi", "shell characters"),
    ("mail-type=END", "one option"), ("--a --b", "one option"), ("--wrap='id'", "shell characters"),
])
def test_extra_sbatch_lines_are_options_without_shell(line, problem):
    found = sbatch_line_problem(line)
    assert (found is None) if problem is None else (problem in found), found


def test_slurm_and_hosts_exclude_each_other_and_problems_name_their_line():
    text = WORKLOAD.replace("  slurm:\n", "  hosts: [a, b]\n  slurm:\n").replace('"04:00:00"', '"4h"').replace(
        "--comment=squad", "--nodes=4")
    problems = {p.path: p for p in validate_text(text, "w.yaml").problems}
    assert "exclude each other" in problems["compute.hosts"].message
    assert problems["compute.slurm.time"].line == 11 and "4h" in problems["compute.slurm.time"].message
    assert problems["compute.slurm.extra_sbatch[1]"].line == 14


def test_nodes_follow_the_accelerators_and_a_mismatch_is_refused():
    plan = slurm_plan()
    assert plan.topology.num_nodes == 2 and plan.topology.procs_per_node == 8 and not plan.topology.is_local
    assert [n.node_dir for n in plan.nodes] == [f"/shared/alice/fsdp-tui/{plan.run_id}/node-{r}" for r in (0, 1)]
    assert plan.nodes[1].host_display == "SLURM node 1 via alice@login.cluster.example"
    problems = validate_text(WORKLOAD.replace("    partition: gpu\n", "    partition: gpu\n    nodes: 3\n"),
                             "w.yaml").problems
    assert any(p.path == "compute.slurm.nodes" and "make 2" in p.message for p in problems)


SQUEUE = """\
101|PENDING|Resources|N/A|
102|PENDING|Priority|2026-11-23T12:00:00|
103|RUNNING|None|2026-11-23T11:00:00|n0,n1
104|TIMEOUT|TimeLimit|2026-11-23T10:00:00|n0,n1
105_3|COMPLETED|None|2026-11-23T10:00:00|n0
"""


def test_squeue_answers_are_read_by_job_id():
    jobs = parse_squeue(SQUEUE + "garbage line\n")
    assert set(jobs) == {"101", "102", "103", "104", "105_3"}
    assert jobs["101"].waiting and jobs["101"].reason == "Resources" and jobs["101"].start == ""
    assert jobs["103"].active and jobs["103"].reason == "" and jobs["103"].nodes == "n0,n1"
    assert jobs["104"].ended and jobs["104"].ended_words() == "reached its time limit"


def test_a_node_is_judged_from_its_record_and_the_queue():
    jobs = parse_squeue(SQUEUE)
    absent = NodeStatus(1, "absent")
    waiting = judge(absent, 1, "101", jobs["101"], False)
    assert waiting.state == "starting" and waiting.queued == "pending: Resources" and not waiting.orphaned
    starting = judge(absent, 1, "103", jobs["103"], False)
    assert starting.state == "starting" and not starting.orphaned and not starting.queued
    running = judge(NodeStatus(1, "running", 1, supervisor_alive=False), 1, "103", jobs["103"], False)
    assert running.state == "running" and not running.orphaned
    stale = judge(NodeStatus(1, "running", 1), 1, "101", jobs["101"], False)  # the queue view lags the node
    assert stale.state == "running" and not stale.queued
    done_early = judge(NodeStatus(1, "exited", 1, 0), 1, "101", jobs["101"], False)
    assert done_early.state == "exited" and done_early.exit_code == 0 and not done_early.error
    # When the node's task recorded its end: an owner that adopts the run after the job ended says so.
    for job in ("101", "104", "105_3"):
        ended = judge(NodeStatus(1, "exited", 1, 0, ended_at=1000.5), 1, job, jobs[job], False)
        assert ended.state == "exited" and ended.ended_at == 1000.5, (job, ended)
    signalled = NodeStatus(1, "exited", 1, -15, stopped=True)  # SIGTERM from SLURM: scancel or time limit?
    assert judge(signalled, 1, "103", jobs["103"], False).state == "running"  # the queue will say
    assert judge(signalled, 1, "103", jobs["103"], True).stopped  # our own cancel
    assert judge(signalled, 1, "104", jobs["104"], False).error == "the SLURM job reached its time limit"
    external = judge(signalled, 1, "104", parse_squeue("104|CANCELLED|None||n0\n")["104"], False)
    assert external.state == "exited" and external.stopped
    old_attempt = judge(NodeStatus(1, "exited", 1, 0), 2, "103", jobs["103"], False)
    assert old_attempt.state == "starting" and old_attempt.attempt == 2
    timed_out = judge(NodeStatus(1, "running", 1), 1, "104", jobs["104"], False)
    assert timed_out.state == "exited" and "reached its time limit" in timed_out.error and "node 1" in timed_out.error
    checkpointed = judge(NodeStatus(1, "exited", 1, 0, stopped=True, resubmit="time limit"), 1, "104",
                         jobs["104"], False)
    assert checkpointed.resubmit == "time limit" and not checkpointed.stopped and not checkpointed.error
    cancelled = judge(NodeStatus(1, "exited", 1, -15, stopped=True), 1, "104", None, True)
    assert cancelled.stopped
    gone = judge(absent, 1, "999", None, False)
    assert gone.state == "exited" and "no longer in the queue" in gone.error


def test_a_slurm_node_task_samples_its_gpus_into_the_shared_directory(tmp_path, monkeypatch):
    """The launcher cannot reach a compute node, so its task writes nvidia-smi's samples where the login
    node reads them. nvidia-smi is a stand-in script here: this machine has no GPU."""
    import json
    import threading

    from launcher.backends.agent import slurm_task

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, 1234, 81559, 97'\necho '1, NVIDIA H100 80GB HBM3, 10, 81559, 0'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    done = threading.Event()
    spec = {"attempt": 1, "env": {"FSDP_TUI_RUN_ID": "r"}, "builtin_trainer": False}
    watcher = threading.Thread(target=slurm_task._watch, args=(str(node_dir), str(tmp_path), spec, 0, done))
    watcher.start()
    deadline = time.monotonic() + 10
    while not (node_dir / "gpus.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    done.set()
    watcher.join()
    gpus = json.loads((node_dir / "gpus.json").read_text())["gpus"]
    assert [(g["index"], g["memory_used_mib"], g["utilization_pct"]) for g in gpus] == [(0, 1234.0, 97.0),
                                                                                        (1, 10.0, 0.0)]


@pytest.mark.parametrize("status,err,words", [
    (0, "sbatch: Job 7 to start at 2026-11-23T12:00:00 using 16 processors on nodes n[0-1] in partition gpu",
     "to start at"),
    (1, "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     "would refuse the job"),
    (1, "sbatch: fatal: Could not establish a configuration source", "cannot reach a SLURM controller"),
    (127, "sbatch: not found on this node's PATH (is this a SLURM login node?)", "must be a login node"),
])
def test_sbatch_test_only_tells_a_refused_job_from_a_login_without_slurm(status, err, words):
    import asyncio

    from launcher.backends.slurm.checks import test_only

    class Login:
        plan = slurm_plan()
        label = "alice@login"

        async def ask(self, argv, env=None, **kw):
            if argv[0] == "sinfo":  # asked only when the job is refused: which nodes are down
                assert status != 0
                return 0, "n1|idle|none\nn2|down*|Not responding\n", ""
            assert argv[:2] == ["sbatch", "--test-only"] and "--wrap=true" in argv
            assert not any(a.startswith(("--output", "--signal")) for a in argv)
            return status, "", err

    check = asyncio.run(test_only(Login()))
    assert check.status == ("ok" if status == 0 else "error")
    assert words in check.detail + check.fix
    if words == "would refuse the job":
        assert "(sinfo: n2 down, not responding: Not responding)" in check.detail


def test_the_time_limits_signal_waits_for_a_worker_that_catches_it(tmp_path):
    """The flag that SLURM's signal leaves can come while the trainer's workers are still starting: none is
    signalled before it has its handler (SIGUSR1's default would end it), and the signal still reaches it
    once it has. A real process stands in for a worker: it installs its handler after a second."""
    import json
    import subprocess
    import sys
    import threading

    from launcher.backends.agent import slurm_task

    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    (tmp_path / slurm_task.CHECKPOINT_NOW.format(attempt=1)).touch()  # the job was signalled already
    got = tmp_path / "got"
    worker = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys, time\ntime.sleep(1.0)\n"
         "signal.signal(signal.SIGUSR1, lambda *a: open(sys.argv[1], 'w').write('USR1'))\n"
         "time.sleep(30)\n", str(got)],
        env={"PATH": "/usr/bin:/bin", "FSDP_TUI_RUN_ID": "r-sig", "NODE_RANK": "0", "RANK": "0"})
    done = threading.Event()
    spec = {"attempt": 1, "env": {"FSDP_TUI_RUN_ID": "r-sig"}, "builtin_trainer": True}
    watcher = threading.Thread(target=slurm_task._watch, args=(str(node_dir), str(tmp_path), spec, 0, done))
    watcher.start()
    try:
        deadline = time.monotonic() + 20
        while not (got.exists() and got.read_text()) and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the handler's file can be there a moment before its word is
        assert worker.poll() is None, "the signal ended a worker that had no handler yet"
        assert got.read_text() == "USR1"
        assert json.loads((node_dir / "state.json").read_text())["resubmit"] == "time limit"
    finally:
        done.set()
        watcher.join()
        worker.kill()
        worker.wait()
