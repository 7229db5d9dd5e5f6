"""The test SLURM cluster itself (tests/support/slurm_cluster.py): a 2-node job submitted over SSH on the
login node runs once on each node, scancel leaves nothing of a job behind, stop_cluster leaves nothing."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # ~8 s: slurmctld schedules its first batch job ~3 s after it starts

ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"}


def ssh(cluster, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(cluster.ssh_argv(command), env=cluster.ssh_env(), capture_output=True, text=True,
                          timeout=timeout)


def job_state_over_ssh(cluster, job_id: str) -> str:
    done = ssh(cluster, f"squeue -h -t all -j {job_id} -o %T")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def write_script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\n#SBATCH --nodes=2 --ntasks-per-node=1\n#SBATCH --chdir={folder}\n"
                      f"#SBATCH --output={folder}/%x-%j.out\n{body}\n")
    return script


@pytest.fixture
def idle_slurm(slurm_module):
    """One cluster for the module's first two tests, from an empty queue (its first job waits ~3 s)."""
    slurm_module.wait_idle()
    return slurm_module


def test_two_node_job_submitted_over_ssh_runs_once_on_each_node(idle_slurm):
    slurm = idle_slurm
    folder = slurm.job_dir / "hosts"
    script = write_script(folder, "hosts.sh", f"""srun sh -c 'out={folder}/task-$SLURM_PROCID
echo "$SLURM_NODEID $(hostname) $SLURM_CONF" > $out; getent hosts {" ".join(slurm.node_names)} | wc -l >> $out'""")
    done = ssh(slurm, f"sbatch --parsable {script}")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    assert job_id.isdigit()

    deadline = time.monotonic() + 30
    while (state := job_state_over_ssh(slurm, job_id)) in ACTIVE:
        assert time.monotonic() < deadline, f"job {job_id} still {state}"
        time.sleep(0.1)
    assert state == "COMPLETED", (folder / f"hosts.sh-{job_id}.out").read_text()

    tasks = sorted(p.read_text().split() for p in folder.glob("task-*"))
    assert [t[0] for t in tasks] == ["0", "1"]  # SLURM_NODEID 0 and 1, each once
    assert sorted(t[1] for t in tasks) == sorted(slurm.node_names)
    assert {t[2] for t in tasks} == {str(slurm.conf)}  # the login's SLURM_CONF, carried into the job
    assert [t[3] for t in tasks] == [str(len(slurm.node_names))] * 2  # every node name resolves in a job


def test_scancel_of_a_running_two_node_job_leaves_no_process_of_it(idle_slurm):
    slurm = idle_slurm
    script = write_script(slurm.job_dir / "sleep", "sleep.sh", "srun sleep 300")
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
    from tests.support.slurm_cluster import start_cluster, stop_cluster

    try:
        cluster = start_cluster(tmp_path)
    except RuntimeError as err:
        pytest.skip(str(err))
    try:
        script = write_script(cluster.job_dir, "left.sh", "srun sleep 300")
        job_id = cluster.run(["sbatch", "--parsable", str(script)]).stdout.strip()
        deadline = time.monotonic() + 120  # a loaded machine starts the first job slowly
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
    assert not cluster.munge_dir.exists()


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


def test_a_bring_up_failing_half_way_stops_what_it_started(tmp_path, monkeypatch):
    import tests.support.slurm_cluster as sc

    made, popened = [], []
    real_switch, real_daemon = sc.make_switch, sc._daemon
    monkeypatch.setattr(sc, "make_switch", lambda *a, **kw: made.append(real_switch(*a, **kw)) or made[-1])
    monkeypatch.setattr(sc, "_daemon", lambda *a: popened.append(real_daemon(*a)) or popened[-1])

    def no_host_key(path):  # after munged, slurmctld and both slurmd started
        raise RuntimeError("ssh-keygen failed (simulated)")

    monkeypatch.setattr(sc, "keygen", no_host_key)
    with pytest.raises(RuntimeError) as err:
        sc.start_cluster(tmp_path)
    if not popened:
        pytest.skip(str(err.value))
    assert "simulated" in str(err.value)
    assert len(popened) == 4 and all(p.poll() is not None for p in popened)
    socket_arg = next(a for a in popened[0].args if a.startswith("--socket="))
    assert not Path(socket_arg.split("=", 1)[1]).parent.exists()  # munged's folder under /run
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in netns for ns in made[0].namespaces)
    assert not Path(f"/sys/class/net/{made[0].bridge}").exists()
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()
