"""SLURM on a bad day, without a cluster: SLURM's own words (recorded ``slurm-<job>.out``, ``sinfo`` and
``sacct`` text) read into a cause, a requeue judged as a new attempt, a reason that never clears and a
task that never starts ending the attempt, and the options that change what a job is refused."""

from __future__ import annotations

import pytest

from launcher.backends.base import NodeStatus
from launcher.backends.slurm.queue import QueueEntry, parse_squeue
from launcher.backends.slurm.said import (
    batch_output_cause,
    dead_nodes,
    never_clears,
    parse_sacct_steps,
    requeue_words,
    sacct_words,
    this_runs_output,
)
from launcher.backends.slurm.verdict import START_BOUND_S, judge, queued_words
from launcher.workload.slurm import sbatch_line_problem
from launcher.workload.validate import validate_text

# Recorded on the project's 2-node test cluster (Slurm 22.05), job processes of fsl-n1 SIGKILLed.
KILLED = """\
task 0 on fsl-n0
srun: error: fsl-n1: task 1: Killed
srun: launch/slurm: _step_signal: Terminating StepId=3.0
slurmstepd-fsl-n0: error: *** STEP 3.0 ON fsl-n0 CANCELLED AT 2026-11-25T06:18:48 ***
srun: error: fsl-n0: task 0: Terminated
srun: Force Terminated StepId=3.0
"""
# job_dir not visible on fsl-n1: its step starts in /tmp and the task cannot find the agent.
UNSHARED = """\
slurmstepd-fsl-n1: error: couldn't chdir to `/shared/jobs/r1': No such file or directory: going to /tmp instead
/usr/bin/python3: can't open file '/tmp/node-0/agent.zip': [Errno 2] No such file or directory
srun: error: fsl-n1: task 1: Exited with exit code 2
srun: launch/slurm: _step_signal: Terminating StepId=7.0
slurmstepd-fsl-n0: error: *** STEP 7.0 ON fsl-n0 CANCELLED AT 2026-11-25T06:30:01 ***
srun: error: fsl-n0: task 0: Terminated
"""
CANCELLED_HERE = """\
srun: Job step aborted: Waiting up to 4 seconds for job step to finish.
slurmstepd-fsl-n0: error: *** STEP 2.0 ON fsl-n0 CANCELLED AT 2026-11-25T06:18:42 ***
slurmstepd-fsl-n0: error: *** JOB 2 ON fsl-n0 CANCELLED AT 2026-11-25T06:18:42 ***
srun: error: fsl-n0: task 0: Terminated
srun: error: fsl-n1: task 1: Terminated
"""
NODE_FAIL = """\
srun: error: Node failure on n2
slurmstepd: error: *** JOB 45 ON n1 CANCELLED AT 2026-11-25T06:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***
srun: error: n1: task 0: Killed
"""
TIME_LIMIT = """\
slurmstepd: error: *** STEP 46.0 ON n1 CANCELLED AT 2026-11-25T06:00:00 DUE TO TIME LIMIT ***
srun: error: n1: tasks 0-1: Terminated
"""
OOM = """\
slurmstepd: error: Detected 1 oom_kill event in StepId=47.0. Some of the step tasks have been OOM Killed.
srun: error: n2: task 1: Out Of Memory
"""
REQUEUED_BY_OPERATOR = """\
slurmstepd-fsl-n0: error: *** JOB 9 ON fsl-n0 CANCELLED AT 2026-11-25T06:40:00 DUE TO JOB REQUEUE ***
srun: error: fsl-n1: task 1: Terminated
"""


@pytest.mark.parametrize("text,kind,node,task,detail", [
    (KILLED, "killed", "fsl-n1", 1, ""),
    (UNSHARED, "exited", "fsl-n1", 1, "couldn't chdir"),
    (NODE_FAIL, "node_fail", "n2", None, ""),
    (TIME_LIMIT, "time_limit", "n1", None, ""),
    (OOM, "oom", "n2", 1, ""),
    (REQUEUED_BY_OPERATOR, "requeue", "fsl-n0", None, ""),
    (CANCELLED_HERE, "killed", "fsl-n0", 0, ""),
    ("task 0 on n1\n", None, None, None, None),
], ids=["killed", "unshared-job-dir", "node-fail", "time-limit", "oom", "requeue", "cancelled", "nothing"])
def test_the_first_failure_slurm_names_is_the_cause(text, kind, node, task, detail):
    cause = batch_output_cause(text)
    if kind is None:
        assert cause is None
        return
    assert (cause.kind, cause.node, cause.task) == (kind, node, task)
    assert detail in cause.detail
    assert cause.line.strip() in text


def test_the_requeue_reason_is_read_from_the_cut_short_run():
    assert requeue_words(REQUEUED_BY_OPERATOR) == "by an operator's scontrol requeue"
    assert requeue_words(NODE_FAIL) == "after NODE_FAIL on n1"
    assert requeue_words(KILLED) == ""


@pytest.mark.parametrize("text, requeued_run, kept", [
    (REQUEUED_BY_OPERATOR, True, False),  # the batch script never started again: the cut-short run's words
    (NODE_FAIL, True, False),
    (KILLED, True, True),  # the new run's own output (SLURM emptied the file when it started)
    (REQUEUED_BY_OPERATOR, False, True),  # a job's first run: its words are its own
    ("", True, True),
])
def test_a_requeued_run_is_not_blamed_on_the_run_it_replaced(text, requeued_run, kept):
    assert this_runs_output(text, requeued_run) == (text if kept else "")
    if not kept:
        assert batch_output_cause(this_runs_output(text, requeued_run)) is None


def test_sinfo_names_the_nodes_that_stopped_responding():
    out = "n1|mixed|none\nn2|completing*|none\nn3|down*|Not responding\nn4|idle|\nn5|drained|maint\n"
    assert dead_nodes(out) == {"n2": "completing, not responding", "n3": "down, not responding: Not responding"}


def test_sacct_steps_say_which_step_failed_and_how():
    out = "45|FAILED|2:0|n[1-2]\n45.batch|FAILED|2:0|n1\n45.0|FAILED|2:0|n[1-2]\n45.extern|COMPLETED|0:0|n[1-2]\n"
    steps = parse_sacct_steps(out + "junk\n")
    assert [(s.step, s.state, s.exit_code, s.signal) for s in steps][:3] == [
        ("45", "FAILED", 2, 0), ("45.batch", "FAILED", 2, 0), ("45.0", "FAILED", 2, 0)]
    assert sacct_words(steps).startswith("step 45 FAILED exit 2 on n[1-2]; step 45.batch")
    assert "extern" not in sacct_words(steps)
    assert parse_sacct_steps("47.0|CANCELLED by 0|0:9|n2\n")[0].signal == 9


ENTRY = {
    "pending": QueueEntry("9", "PENDING", "BeginTime"),
    "requeued": QueueEntry("9", "REQUEUED", ""),
    "running": QueueEntry("9", "RUNNING", "", "", "n[1-2]"),
    "completing": QueueEntry("9", "COMPLETING", "", "", "n[1-2]"),
    "failed": QueueEntry("9", "FAILED", "NonZeroExitCode"),
}
STOPPED = NodeStatus(0, "exited", 1, -15, stopped=True)


@pytest.mark.parametrize("node,attempt,entry,cancelled,requeued", [
    (STOPPED, 1, "pending", False, True),  # SLURM stopped its task and the job waits again
    (STOPPED, 1, "requeued", False, True),
    (NodeStatus(0, "exited", 1, -15), 1, "pending", False, True),  # the command died before the task recorded it
    (NodeStatus(0, "exited", 1, 143), 1, "pending", False, True),
    (NodeStatus(0, "exited", 1, 0), 1, "pending", False, False),  # a stale queue view of a quick job
    (NodeStatus(0, "starting", 2), 1, "running", False, True),  # the job's next run already recorded itself
    (STOPPED, 1, "pending", True, False),  # our own cancel
    (STOPPED, 1, "completing", False, False),  # an scancel from elsewhere or the time limit: the queue will say
    (NodeStatus(0, "exited", 1, -15, stopped=True, resubmit="time limit"), 1, "pending", False, False),
    (NodeStatus(0, "exited", 1, 0), 2, "pending", False, False),  # our own next attempt, waiting
])
def test_a_job_back_in_the_queue_is_a_requeue(node, attempt, entry, cancelled, requeued):
    judged = judge(node, attempt, "9", ENTRY[entry], cancelled)
    assert bool(judged.requeued) == requeued, judged
    if requeued:
        assert judged.state == "exited" and judged.attempt == attempt and not judged.stopped


@pytest.mark.parametrize("reason,ends", [("PartitionTimeLimit", "MaxTime"), ("InvalidAccount", "account"),
                                         ("AssocMaxWallDurationPerJobLimit", "MaxWall"), ("Resources", None),
                                         ("Priority", None), ("JobHeldUser", None), ("BeginTime", None)])
def test_a_pending_reason_that_never_clears_ends_the_attempt_naming_the_limit(reason, ends):
    judged = judge(NodeStatus(0, "absent"), 1, "9", QueueEntry("9", "PENDING", reason), False)
    if ends is None:
        assert judged.state == "starting" and reason in judged.queued and never_clears(reason) is None
    else:
        assert judged.state == "exited" and judged.exit_code is None
        assert reason in judged.error and ends in judged.error and "compute.slurm" in judged.error


def test_a_task_silent_past_the_bound_after_its_job_started_fails_naming_the_output():
    absent = NodeStatus(1, "absent")
    assert judge(absent, 1, "9", ENTRY["running"], False, active_for_s=START_BOUND_S - 1).state == "starting"
    late = judge(absent, 1, "9", ENTRY["running"], False, active_for_s=START_BOUND_S + 1)
    assert late.state == "exited" and "node 1" in late.error and "slurm-9.out" in late.error
    recorded = judge(NodeStatus(1, "starting", 1), 1, "9", ENTRY["running"], False, active_for_s=1e6)
    assert recorded.state == "starting" and not recorded.error


@pytest.mark.parametrize("line,words", [
    ("9|PENDING|Resources|N/A|", "pending: Resources"),
    ("9|PENDING|None|N/A|", "pending, no reason given yet"),
    ("9|PENDING|JobHeldUser|N/A|", "pending: JobHeldUser"),
    ("9|PENDING|pending: JobHeldUser|N/A|", "pending: JobHeldUser"),
])
def test_pending_wording_names_the_reason_once(line, words):
    assert queued_words(parse_squeue(line)["9"]) == words


@pytest.mark.parametrize("line,words", [
    ("--array=0-1", "sweep"), ("-a 0-3", "sweep"), ("--het-job", "homogeneous"), ("--dependency=afterok:4", "forever"),
    ("-d afterany:4", "forever"), ("--requeue", "compute.slurm.requeue: true"), ("--no-requeue", "already"),
    ("--export=NONE", "secrets"),
])
def test_options_that_change_what_a_job_is_are_refused_with_the_way_to_say_it(line, words):
    assert words in sbatch_line_problem(line)


def test_requeue_is_a_workload_field_and_ssh_settings_govern_the_login_link():
    base = "experiment_name: x\ncommand: run\ncompute:\n  num_accelerators: 2\n  slurm: {login: %s%s}\n%s"
    ok = validate_text(base % ("alice@login", ", requeue: true", "ssh: {connect_timeout_s: 5}\n"), "w.yaml")
    assert ok.ok and ok.workload.compute.slurm.requeue is True
    assert not any("ssh settings are unused" in p.message for p in ok.problems)
    local = validate_text(base % ("local", "", "ssh: {connect_timeout_s: 5}\n"), "w.yaml")
    assert any(p.path == "ssh" and "login is local" in p.message for p in local.problems)
    array = validate_text(base % ("local", ", extra_sbatch: ['--array=0-1']", ""), "w.yaml")
    assert not array.ok and any(p.path == "compute.slurm.extra_sbatch[0]" and "--array" in p.message
                                for p in array.problems)


def test_a_requeued_task_records_the_next_attempt_and_marks_it(tmp_path, monkeypatch):
    from launcher.backends.agent.slurm_task import CHECKPOINT_NOW, requeued_attempt

    spec = {"attempt": 3, "marker": None}
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    assert requeued_attempt(3, spec, str(tmp_path)) == (3, spec)
    flag = tmp_path / CHECKPOINT_NOW.format(attempt=3)
    flag.touch()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    attempt, again = requeued_attempt(3, spec, str(tmp_path))
    assert attempt == 5 and again["attempt"] == 5 and again["marker"].startswith("5 (SLURM requeued job 41")
    assert not flag.exists()  # the cut-short run's time-limit flag does not signal this run


def test_a_command_the_agent_cannot_start_is_its_own_signature():
    from launcher.runs.core.triage import triage_run

    log = "fsdp-tui agent: cannot start 'bash': [Errno 2] No such file or directory: 'bash'\n"
    report = triage_run({0: log}, {0: 127})
    assert report.signature == "cannot_start" and "cannot start 'bash'" in report.excerpt


@pytest.mark.parametrize("state,detail,shown", [
    ("pending", "queued (pending: Resources)", True), ("failed", "node 1: killed", True),
    ("running", "the job has its nodes", False), ("running", "stalled at step 5: no step for 30 s", True),
    ("succeeded", "", False),
])
def test_runs_says_why_a_run_waits_in_the_queue(state, detail, shown):
    from launcher.cli.runs import why_shown

    assert why_shown(state, detail) == (detail if shown else "")


@pytest.mark.parametrize("extra,window_s", [
    (", time: 30", 30 * 60 + 60), ("", 24 * 3600), (", time: '1-00:00:00'", 24 * 3600 + 60),
])
def test_a_lost_login_is_waited_for_until_the_jobs_own_time_limit(extra, window_s):
    from launcher.backends.slurm.login import login_window_s
    from launcher.workload.plan import build_plan

    text = f"experiment_name: x\ncommand: run\ncompute:\n  num_accelerators: 2\n  slurm: {{login: a@b{extra}}}\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id="r", node_root="/j")
    assert login_window_s(plan) == window_s
    timed = validate_text(text + "timeout_minutes: 10\nssh: {lost_after_s: 7200}\n", "w.yaml").workload
    # timeout_minutes sets --time when slurm.time does not; lost_after_s is the least it waits
    assert login_window_s(build_plan(timed, run_id="r", node_root="/j")) == (max(7200, window_s) if extra else 7200)


@pytest.mark.parametrize("state,node_state,swept,refused", [
    ("running", "running", False, "may still be running (the run is running)"),
    ("failed", "lost", False, "login node was lost"),
    ("failed", "lost", True, ""),
    ("failed", "exited", False, ""),
    ("succeeded", "exited", False, ""),
])
def test_relaunch_refuses_while_a_slurm_job_may_still_run(tmp_path, state, node_state, swept, refused):
    import json

    from launcher.events import NodeState, RunState
    from launcher.present.relaunch import hazard_words
    from launcher.runs.core.housekeeping import SWEPT
    from launcher.runs.core.layout import save_plan
    from launcher.runs.core.store import NodeRecord, RunRecord
    from launcher.runs.leftovers import job_may_live
    from launcher.workload.plan import build_plan

    text = "experiment_name: x\ncommand: run\ncompute:\n  num_accelerators: 2\n  slurm: {login: a@b}\n"
    save_plan(tmp_path, build_plan(validate_text(text, "w.yaml").workload, run_id="r1", node_root="/j"))
    if swept:
        (tmp_path / SWEPT).write_text(json.dumps({"1": {"done": True}}))

    class Summary:
        run_id = "r1"

    Summary.state = RunState(state)
    nodes = [NodeRecord(r, "h", "/j", NodeState(node_state if r == 1 else "exited"), None, "") for r in (0, 1)]
    hazard = job_may_live(RunRecord(Summary(), [], nodes, tmp_path))
    assert (hazard is not None and refused in hazard_words(hazard)) if refused else hazard is None
