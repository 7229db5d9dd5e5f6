"""``fsdp-tui doctor`` for SLURM workloads against the real 2-node test cluster: the login node is reached,
the scheduler is asked (sbatch --test-only, sinfo) and a short probe job runs on the compute nodes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.slurm_runs import slurm_cli, workload

pytestmark = pytest.mark.slow
ACTIVE = "pending,running,completing,configuring,suspended"


def doctor(home: Path, tmp: Path, cluster, slurm: str = "", body: str = "command: echo hi\n"):
    cluster.wait_idle()
    out = slurm_cli(home, cluster, "doctor", workload(tmp, cluster, body, slurm=slurm), "--json", timeout=240)
    report = json.loads(out.stdout)
    assert [n["label"] for n in report["nodes"]] == [f"SLURM via {cluster.login_alias}"]
    return out.returncode, {c["name"]: c for c in report["nodes"][0]["checks"]}, report


def test_a_good_slurm_workload_passes_every_check_and_leaves_no_job(home, tmp_path, slurm_module):
    code, checks, report = doctor(home, tmp_path, slurm_module)
    assert list(checks) == ["reachable", "sbatch --test-only", "partition", "nodes", "time limit", "probe job",
                            "hostname", "python", "torch", "job_dir", "secrets"]
    assert code == 0 and report["ok"], checks
    assert {c["status"] for c in checks.values()} == {"ok"}, checks
    assert checks["reachable"]["detail"] == "connected over SSH, host key verified"
    assert checks["hostname"]["detail"] == ", ".join(slurm_module.node_names)
    assert checks["partition"]["detail"] == "debug is up"
    assert all(h in checks["job_dir"]["detail"] for h in slurm_module.node_names)
    assert slurm_module.jobs(ACTIVE) == {}
    assert not any(p.name.startswith("doctor-probe-") for p in (Path(slurm_module.job_dir) / "doctor").iterdir())


def test_a_wrong_partition_says_did_you_mean_debug(home, tmp_path, slurm_module):
    slurm_module.wait_idle()
    wl = workload(tmp_path, slurm_module, "command: echo hi\n").read_text().replace(
        f"partition: {slurm_module.partition}", "partition: debg")
    path = tmp_path / "wrong.yaml"
    path.write_text(wl)
    out = slurm_cli(home, slurm_module, "doctor", path, "--json", timeout=240)
    checks = {c["name"]: c for c in json.loads(out.stdout)["nodes"][0]["checks"]}
    assert out.returncode == 1
    assert checks["partition"]["status"] == "error" and "did you mean debug?" in checks["partition"]["fix"]
    assert slurm_module.jobs(ACTIVE) == {}


def test_a_time_limit_above_the_partitions_max_time_is_an_error(home, tmp_path, slurm_module):
    from tests.support.slurm_cluster import SHORT_MAX_TIME

    wl = workload(tmp_path, slurm_module, "command: echo hi\n", slurm=f", time: {SHORT_MAX_TIME + 10}")
    path = tmp_path / "short.yaml"
    path.write_text(wl.read_text().replace(f"partition: {slurm_module.partition}",
                                           f"partition: {slurm_module.short_partition}"))
    slurm_module.wait_idle()
    out = slurm_cli(home, slurm_module, "doctor", path, "--json", timeout=240)
    checks = {c["name"]: c for c in json.loads(out.stdout)["nodes"][0]["checks"]}
    assert out.returncode == 1, checks
    assert checks["time limit"]["status"] == "error"
    assert f"MaxTime {SHORT_MAX_TIME}" in checks["time limit"]["detail"]
    assert checks["probe job"]["status"] == "ok"  # the probe asks for 2 minutes: it runs there
    assert slurm_module.jobs(ACTIVE) == {}


def test_a_probe_job_that_waits_is_a_warning_with_the_reason_and_is_cancelled(home, tmp_path, slurm_module,
                                                                              monkeypatch):
    """Both nodes held by another job: the probe job waits, is cancelled past its time, and says why."""
    import asyncio

    from launcher.backends.registry import backend_for
    from launcher.backends.slurm import probe_job
    from launcher.workload.load import plan_file

    slurm_module.wait_idle()
    blocker = slurm_module.run(["sbatch", "--parsable", "--nodes=2", "--exclusive", "--time=5",
                                f"--partition={slurm_module.partition}", f"--chdir={tmp_path}",
                                "--wrap=sleep 120"]).stdout.strip().split(";")[0]
    try:
        monkeypatch.setenv("HOME", str(slurm_module.client_home))
        monkeypatch.setenv("FSDP_TUI_HOME", str(home))
        monkeypatch.setattr(probe_job, "PENDING_S", 4.0)
        plan = plan_file(workload(tmp_path, slurm_module, "command: echo hi\n"), home=home, run_id="doctor").plan

        async def probe():
            backend = backend_for(plan)
            try:
                return await probe_job.probe_checks(backend.login)
            finally:
                await backend.close()

        checks = asyncio.run(probe())
        assert [c.name for c in checks] == ["probe job"]
        assert checks[0].status == "warning" and "still waiting after 4 s" in checks[0].detail, checks
        assert "Resources" in checks[0].detail or "Priority" in checks[0].detail, checks
        assert set(slurm_module.jobs(ACTIVE)) == {blocker}  # the probe job is gone, the blocker stays
    finally:
        slurm_module.run(["scancel", blocker], check=False)


def test_a_python_the_nodes_lack_is_an_error_and_the_rest_is_still_checked(home, tmp_path, slurm_module):
    slurm_module.wait_idle()
    wl = workload(tmp_path, slurm_module, "command: echo hi\n")
    path = tmp_path / "nopython.yaml"
    path.write_text(wl.read_text().replace(f"python: {sys.executable}", "python: /nonexistent/bin/python3"))
    out = slurm_cli(home, slurm_module, "doctor", path, "--json", timeout=240)
    checks = {c["name"]: c for c in json.loads(out.stdout)["nodes"][0]["checks"]}
    assert out.returncode == 1, checks
    assert checks["login python"]["status"] == "error" and "/nonexistent/bin/python3" in checks["login python"]["detail"]
    assert checks["partition"]["status"] == "ok" and checks["sbatch --test-only"]["status"] == "ok"
    assert checks["probe job"]["status"] == "error" and "/nonexistent/bin/python3" in checks["probe job"]["fix"]
    assert slurm_module.jobs(ACTIVE) == {}
