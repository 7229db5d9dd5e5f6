"""SLURM on a bad day, on the real 2-node test cluster (one per module): a node's job processes killed,
a ``job_dir`` one node cannot see, a time above the partition's MaxTime, and ``scontrol requeue``.
Each run is short; the parsing of SLURM's words is tested on recorded text in test_slurm_causes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from launcher.runs.core.store import RunStore
from tests.support.cli import events, tagged, wait_until
from tests.support.slurm_runs import (
    RESUMING,
    first_event,
    job_of,
    node_file,
    node_pids,
    slurm_cli,
    slurm_popen,
    wait_said,
    workload,
)

pytestmark = pytest.mark.slow


def _triage(home: Path, run_id: str) -> dict:
    return json.loads((home / "runs" / run_id / "triage.json").read_text())


SLEEPER = "command: |\n  echo up $NODE_RANK; sleep 300 & wait\n"


def test_a_killed_node_is_named_with_slurms_line_and_requeue_is_refused_by_default(home, tmp_path, slurm_module):
    """The OOM-killer case: every process of node 1's task dies at once. SLURM's line names it as the root
    cause within 30 s; node 0, stopped by srun, is not blamed. Without compute.slurm.requeue the job was
    submitted --no-requeue, so an operator's requeue is refused and cannot rerun the attempt."""
    slurm_module.wait_idle()
    proc = slurm_popen(home, slurm_module, "run", workload(tmp_path, slurm_module, SLEEPER), "--json")
    try:
        run_id = first_event(proc)
        job = job_of(slurm_module, run_id)
        wait_until(lambda: len(tagged(run_id)) >= 4, 90, "both nodes run the command")
        refused = slurm_module.run(["scontrol", "requeue", job], check=False)
        assert refused.returncode != 0 and "disabled" in refused.stderr, refused
        for pid in node_pids(slurm_module, job, 1):
            os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=120)
        assert proc.returncode != 0
    finally:
        proc.kill()
    triage = _triage(home, run_id)
    assert triage["node_rank"] == 1, triage
    assert f"srun: error: {slurm_module.node_names[1]}: task 1: Killed" in triage["summary"], triage
    assert triage["summary"].startswith(f"node 1 (SLURM node 1 via {slurm_module.login_alias})")
    details = [t[3] for t in RunStore(home).get_run(run_id).transitions]
    assert any(d.startswith("stopping: node 1 ") for d in details), details
    assert not any("requeued" in d for d in details), details  # a job stopped within seconds is no requeue
    assert tagged(run_id) == []


def test_a_job_dir_one_node_cannot_see_fails_the_run_with_slurms_message(home, tmp_path, slurm_module):
    """job_dir hidden on node 1 (an empty tmpfs over it in that node's mount namespace): its step starts
    in /tmp and cannot find the task; srun ends the job, and the run fails with SLURM's words at once."""
    slurm_module.wait_idle()
    slurmd = slurm_module.procs[f"slurmd-{slurm_module.node_names[1]}"].pid
    in_node = ["nsenter", "-t", str(slurmd), "--mount"]
    subprocess.run([*in_node, "mount", "-t", "tmpfs", "tmpfs", str(slurm_module.job_dir)], check=True)
    try:
        out = slurm_cli(home, slurm_module, "run", workload(tmp_path, slurm_module, SLEEPER), "--json", timeout=240)
    finally:
        subprocess.run([*in_node, "umount", str(slurm_module.job_dir)], check=True)
    evs = events(out.stdout)
    run_id = evs[0]["run_id"]
    assert out.returncode != 0 and evs[-1]["state"] == "failed", out.stdout[-2000:]
    triage = _triage(home, run_id)
    assert triage["node_rank"] == 1, triage
    assert "task 1: Exited with exit code" in triage["summary"] and "couldn't chdir" in triage["summary"], triage
    assert tagged(run_id) == []


def test_a_time_above_the_partitions_max_time_is_refused_at_launch_naming_the_limit(home, tmp_path, slurm_module):
    """sbatch --test-only alone accepts it (EnforcePartLimits=NO): the launch's sinfo check refuses it
    before anything is submitted. (A job forced past it ends at once on PartitionTimeLimit: see the
    judge's table in test_slurm_causes.)"""
    from tests.support.slurm_cluster import SHORT_MAX_TIME

    slurm_module.wait_idle()
    wl = workload(tmp_path, slurm_module, "command: echo hi\n", slurm=f", time: {SHORT_MAX_TIME + 10}")
    wl.write_text(wl.read_text().replace(f"partition: {slurm_module.partition}",
                                         f"partition: {slurm_module.short_partition}"))
    before = set(slurm_module.jobs("all"))
    refused = slurm_cli(home, slurm_module, "run", wl, "--json", timeout=120)
    said = refused.stdout + refused.stderr
    assert refused.returncode == 2, said[-2000:]  # refused before anything is recorded
    assert "nothing was launched" in said and f"partition {slurm_module.short_partition}'s MaxTime" in said, said[-2000:]
    assert set(slurm_module.jobs("all")) == before  # nothing was submitted
    assert slurm_cli(home, slurm_module, "runs", "--json").stdout.strip() == "[]"


def test_a_requeue_is_a_new_attempt_that_resumes_from_the_newest_checkpoint(home, tmp_path, slurm_module):
    """compute.slurm.requeue: true; `scontrol requeue` mid-run. (SLURM holds a requeued job ~2 minutes
    (BeginTime); the test releases it at once with `scontrol update StartTime=now`.)"""
    slurm_module.wait_idle()
    proc = slurm_popen(home, slurm_module, "run", workload(tmp_path, slurm_module, RESUMING, slurm=", requeue: true"),
                       "--json")
    try:
        run_id = first_event(proc)
        job = job_of(slurm_module, run_id)
        metrics = node_file(slurm_module, run_id, 0, "metrics.jsonl")
        wait_until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 5, 90,
                   "a checkpoint and a few steps")
        slurm_module.run(["scontrol", "requeue", job])
        said = wait_said(home, run_id, "requeued by SLURM", timeout=90)
        wait_until(lambda: slurm_module.jobs().get(job) == "PENDING", 90, "the job waits again")  # not while COMPLETING
        # slurmd revoked the job's credential when the cut-short run ended, to the second: a credential
        # issued in that same second is refused ("Job N already killed, do not launch batch job") and
        # the job FAILS, which SLURM's own BeginTime hold of a requeued job avoids. Release it in the
        # next second, not the one the requeue ended in.
        time.sleep(1.1 - time.time() % 1)
        slurm_module.run(["scontrol", "update", f"jobid={job}", "StartTime=now"])
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out[-3000:]
    finally:
        proc.kill()
    retrying = next(t for t in said if "requeued by SLURM" in t[3])
    assert retrying[1] == "retrying" and retrying[2] == 2, said[-3:]
    assert "by an operator's scontrol requeue" in retrying[3]
    assert json.loads(node_file(slurm_module, run_id, 0, "jobs.json").read_text()) == {"1": job, "2": job}
    for rank in (0, 1):
        mirror = (home / "runs" / run_id / "nodes" / f"{rank}.log").read_bytes()
        assert mirror == node_file(slurm_module, run_id, rank, "node.log").read_bytes()  # every line once
        first, marker, second = mirror.decode().partition(f"=== fsdp-tui: attempt 2 (SLURM requeued job {job}")
        assert marker and "=== fsdp-tui: attempt" not in first + second, mirror.decode()[-3000:]
        resumed = int(second.split("resumed from step ")[1].split()[0])
        assert resumed % 3 == 0 and f"step {resumed + 1} of node {rank}" in second
        assert second.count(f"step 12 of node {rank}") == 1 and "step 1 of" not in second
        if rank == 0:
            resumed_at = resumed
    steps = [e["record"]["step"] for e in events(out) if e["type"] == "MetricsRecorded"]
    reached = len(steps) - (12 - resumed_at)  # the first attempt's last step (at or past the checkpoint)
    # the first attempt's steps, then the second's from after the newest checkpoint: each once per attempt
    assert reached >= resumed_at and steps == list(range(1, reached + 1)) + list(range(resumed_at + 1, 13)), steps
    assert tagged(run_id) == []


def _login_down(cluster) -> None:
    """The login node's sshd and every session it holds (its agents) killed: the login is gone."""
    login = cluster.procs["sshd-login"]
    assert login.poll() is None, f"the login node's sshd had already ended ({login.returncode})"  # its pid may be another's now
    listener = login.pid
    children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(p) == listener]
    for pid in [listener, *children]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    cluster.procs["sshd-login"].wait(timeout=10)


def _ppid(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _login_up(cluster) -> None:
    """The login node's sshd again, as the cluster started it (in node 0's namespaces)."""
    from tests.support.sshd import SSHD

    node0 = cluster.procs[f"slurmd-{cluster.node_names[0]}"].pid
    with open(cluster.root / "sshd-login.log", "a") as log:
        cluster.procs["sshd-login"] = subprocess.Popen(
            ["nsenter", "-t", str(node0), "--net", "--uts", "--mount", SSHD, "-D", "-e", "-f", str(cluster.login.conf)],
            stdout=log, stderr=log)
    cluster.login.proc = cluster.procs["sshd-login"]


def test_a_login_away_past_lost_after_s_is_not_the_job(home, tmp_path, slurm_module):
    """ssh.lost_after_s: 1, the login away ~4 times as long: the run keeps reconnecting (the job may still
    be running), follows the job again when the login is back, and every line reaches the records."""
    slurm_module.wait_idle()
    wl = workload(tmp_path, slurm_module, "ssh: {lost_after_s: 1, connect_timeout_s: 2}\ncommand: |\n"
                  "  for i in $(seq 1 40); do echo \"line $i of node $NODE_RANK\"; sleep 0.3; done\n",
                  slurm=", time: 10")
    proc = slurm_popen(home, slurm_module, "run", wl, "--json")
    try:
        run_id = first_event(proc)
        log0 = node_file(slurm_module, run_id, 0, "node.log")
        wait_until(lambda: log0.exists() and b"line 3 of" in log0.read_bytes(), 90, "the job prints")
        _login_down(slurm_module)
        try:
            store = RunStore(home)
            rows = wait_until(lambda: [
                n for n in store.get_run(run_id).nodes
                if n.state.value == "reconnecting" and "the SLURM job may still be running" in n.detail], 60,
                "the nodes say the job may still be running")
            time.sleep(4)  # the login stays away past lost_after_s (1 s): nothing to poll for on our side
            assert store.get_run(run_id).summary.state.value == "running"
        finally:
            _login_up(slurm_module)
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out[-3000:]
    finally:
        proc.kill()
    assert rows
    for rank in (0, 1):
        mirror = (home / "runs" / run_id / "nodes" / f"{rank}.log").read_text()
        job = "".join(line for line in mirror.splitlines(keepends=True) if not line.startswith("fsdp-tui agent: "))
        assert job == "".join(f"line {i} of node {rank}\n" for i in range(1, 41))
