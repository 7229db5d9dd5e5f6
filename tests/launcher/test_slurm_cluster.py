"""The test SLURM cluster itself (tests/launcher/slurm_cluster.py): a 2-node job submitted over SSH on the
login node runs once on each node, scancel leaves nothing of a job behind, stop_cluster leaves nothing."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"}


def ssh(cluster, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(cluster.ssh_argv(command), env=cluster.ssh_env(), capture_output=True, text=True,
                          timeout=timeout)


def job_state_over_ssh(cluster, job_id: str) -> str:
    done = ssh(cluster, f"squeue -h -t all -j {job_id} -o %T")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def write_script(cluster, name: str, body: str) -> Path:
    script = cluster.job_dir / name
    script.write_text(f"#!/bin/sh\n#SBATCH --nodes=2 --ntasks-per-node=1\n#SBATCH --chdir={cluster.job_dir}\n"
                      f"#SBATCH --output={cluster.job_dir}/%x-%j.out\n{body}\n")
    return script


def test_two_node_job_submitted_over_ssh_runs_once_on_each_node(slurm):
    script = write_script(slurm, "hosts.sh", f"""srun sh -c 'out={slurm.job_dir}/task-$SLURM_PROCID
echo "$SLURM_NODEID $(hostname) $SLURM_CONF" > $out; getent hosts {" ".join(slurm.node_names)} | wc -l >> $out'""")
    done = ssh(slurm, f"sbatch --parsable {script}")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    assert job_id.isdigit()

    deadline = time.monotonic() + 30
    while (state := job_state_over_ssh(slurm, job_id)) in ACTIVE:
        assert time.monotonic() < deadline, f"job {job_id} still {state}"
        time.sleep(0.1)
    assert state == "COMPLETED", (slurm.job_dir / f"hosts.sh-{job_id}.out").read_text()

    tasks = sorted(p.read_text().split() for p in slurm.job_dir.glob("task-*"))
    assert [t[0] for t in tasks] == ["0", "1"]  # SLURM_NODEID 0 and 1, each once
    assert sorted(t[1] for t in tasks) == sorted(slurm.node_names)
    assert {t[2] for t in tasks} == {str(slurm.conf)}  # the login's SLURM_CONF, carried into the job
    assert [t[3] for t in tasks] == [str(len(slurm.node_names))] * 2  # every node name resolves in a job


def test_scancel_of_a_running_two_node_job_leaves_no_process_of_it(slurm):
    script = write_script(slurm, "sleep.sh", "srun sleep 300")
    job_id = slurm.run(["sbatch", "--parsable", str(script)]).stdout.strip().split(";")[0]

    def sleeps() -> list[int]:
        return [pid for pid in slurm.job_pids(job_id) if _comm(pid) == "sleep"]

    deadline = time.monotonic() + 30
    while len(sleeps()) < 2:
        assert time.monotonic() < deadline, f"job {job_id}: {slurm.jobs()}"
        time.sleep(0.05)
    assert slurm.jobs("running") == {job_id: "RUNNING"}

    done = ssh(slurm, f"scancel {job_id}")
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 15
    while left := slurm.job_pids(job_id):
        assert time.monotonic() < deadline, f"still running after scancel: {[(p, _comm(p)) for p in left]}"
        time.sleep(0.05)
    slurm.wait_idle(timeout=15)
    assert slurm.jobs()[job_id] == "CANCELLED"


def test_stop_cluster_leaves_no_daemon_namespace_or_mount(tmp_path):
    from tests.launcher.slurm_cluster import start_cluster, stop_cluster

    try:
        cluster = start_cluster(tmp_path)
    except RuntimeError as err:
        pytest.skip(str(err))
    try:
        job_id = cluster.run(["sbatch", "--parsable", str(write_script(cluster, "left.sh", "srun sleep 300"))]
                             ).stdout.strip()
        deadline = time.monotonic() + 30
        while len(cluster.job_pids(job_id)) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        started = cluster.pids()
        daemons = {name: p.pid for name, p in cluster.procs.items()}
        assert {"munged", "slurmctld", "sshd-login"} <= set(daemons) and len(daemons) == 5
        assert set(daemons.values()) <= set(started)
    finally:
        stop_cluster(cluster)

    assert [pid for pid in started if _alive(pid)] == []
    assert cluster.job_pids(job_id) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in netns for ns in cluster.switch.namespaces)
    assert not Path(f"/sys/class/net/{cluster.switch.bridge}").exists()
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False
