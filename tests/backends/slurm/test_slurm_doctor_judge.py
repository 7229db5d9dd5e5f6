"""The SLURM doctor's judgements without a cluster: sinfo's rows, gres, MaxTime against --time, the
probe job's reports and whether job_dir is shared."""

from __future__ import annotations

import pytest

from launcher.backends.slurm.partition import (
    Partition,
    gres_gpus,
    limit_minutes,
    parse_sinfo,
    partition_checks,
    time_check,
)
from launcher.backends.slurm.probe_job import MARKER, node_checks, parse_srun, shared_check, srun_argv
from tests.support.slurm_workload import WORKLOAD, slurm_plan

SINFO = """gpu*|up|2-00:00:00|3|gpu:h100:8(S:0-1)
gpu*|up|2-00:00:00|1|gpu:h100:4
cpu|up|infinite|10|(null)
short|down|30:00|2|gpu:2
"""


def by_name(checks):
    return {c.name: c for c in checks}


def test_sinfo_rows_are_summed_per_partition_and_the_default_is_marked():
    parts = parse_sinfo(SINFO)
    assert sorted(parts) == ["cpu", "gpu", "short"]
    gpu = parts["gpu"]
    assert gpu.default and gpu.node_count == 4 and gpu.nodes_with_gpus(8) == 3 and gpu.nodes_with_gpus(4) == 4
    assert not parts["cpu"].default and parts["cpu"].nodes_with_gpus(1) == 0
    assert parts["short"].available == "down"


@pytest.mark.parametrize("gres, gpus", [("(null)", 0), ("gpu:4", 4), ("gpu:a100:4(S:0-1)", 4),
                                        ("gpu:a100:2,gpu:v100:2", 4), ("mps:100,gpu:tesla:8(S:0,1)", 8),
                                        ("gpu:a100", None), ("", 0)])
def test_gres_gpus(gres, gpus):
    assert gres_gpus(gres) == gpus


@pytest.mark.parametrize("text, minutes", [("UNLIMITED", None), ("infinite", None), ("30:00", 30),
                                           ("2:00:00", 120), ("1-00:00:00", 1440), ("2-12", 3600), ("5", 5)])
def test_partition_max_time(text, minutes):
    assert limit_minutes(text) == minutes


def test_time_limit_against_max_time():
    part = Partition("short", False, "up", "30:00", ((2, 0),))
    assert time_check("45", part).status == "error" and "MaxTime 30:00" in time_check("45", part).detail
    assert "30:00 or less" in time_check("1:00:00", part).fix
    assert time_check("30", part).status == "ok"
    assert time_check("29:59", part).status == "ok"
    assert time_check("1-00:00:00", Partition("long", False, "up", "UNLIMITED", ((1, 0),))).status == "ok"
    assert time_check(None, part).status == "ok"
    assert time_check("10", Partition("odd", False, "up", "n/a", ((1, 0),))).status == "warning"


def test_partition_checks_for_a_gpu_workload():
    checks = by_name(partition_checks(slurm_plan(), SINFO))  # 2 nodes of 8 GPUs, 04:00:00, partition gpu
    assert [checks[n].status for n in ("partition", "nodes", "gpus per node", "time limit")] == ["ok"] * 4
    assert checks["nodes"].detail == "gpu has 4 nodes; the run needs 2"


def test_a_wrong_partition_says_did_you_mean():
    checks = partition_checks(slurm_plan(WORKLOAD.replace("partition: gpu", "partition: gppu")), SINFO)
    assert [c.name for c in checks] == ["partition"] and checks[0].status == "error"
    assert "did you mean gpu?" in checks[0].fix and "cpu, gpu, short" in checks[0].fix


def test_no_partition_named_uses_the_default_and_too_few_gpu_nodes_is_an_error():
    text = WORKLOAD.replace("    partition: gpu\n", "").replace("num_accelerators: 16", "num_accelerators: 32")
    checks = by_name(partition_checks(slurm_plan(text), SINFO))
    assert "gpu (the default)" in checks["partition"].detail
    assert checks["nodes"].status == "ok" and checks["gpus per node"].status == "error"


def test_a_partition_that_is_down_or_too_small():
    text = WORKLOAD.replace("partition: gpu", "partition: short").replace('time: "04:00:00"', "time: 20")
    checks = by_name(partition_checks(slurm_plan(text), SINFO))
    assert checks["partition"].status == "warning" and checks["gpus per node"].status == "error"
    assert checks["time limit"].status == "ok"


def report(host, wrote=True, torch="2.13.0", version=(3, 12, 1)):
    return {"hostname": host, "python": list(version), "executable": "/venv/bin/python",
            "packages": {"torch": torch, "transformers": "4.50.0", "datasets": "3.0", "pydantic": "2.9",
                         "pyyaml": "6.0"}, "wrote": wrote}


def test_srun_label_lines_are_parsed_per_task():
    import json

    out = f"0: hello\n1: {MARKER}{json.dumps(report('n1'))}\n0: \n0: {MARKER}{json.dumps(report('n0'))}\n"
    got = parse_srun(out)
    assert sorted(got) == [0, 1] and got[1]["hostname"] == "n1"


def test_job_dir_shared_only_when_the_login_sees_every_node_file():
    reports = {0: report("n0"), 1: report("n1")}
    assert shared_check(reports, ["n0", "n1"], "/shared/x").status == "ok"
    missing = shared_check(reports, ["n0"], "/shared/x")
    assert missing.status == "error" and "n1" in missing.detail and "not shared" in missing.detail
    assert "job_dir" in missing.fix
    assert shared_check(reports, None, "/shared/x").status == "error"
    bad = shared_check({0: report("n0", wrote="Permission denied")}, ["n0"], "/shared/x")
    assert bad.status == "error" and "Permission denied" in bad.detail


def test_node_checks_group_per_concern():
    plan = slurm_plan()
    checks = by_name(node_checks(plan, "/venv/bin/python", {0: report("n0"), 1: report("n1", torch=None)},
                                 ["n0", "n1"]))
    assert checks["python"].status == "ok" and checks["python"].detail == "3.12.1 (/venv/bin/python) on n0, n1"
    assert checks["torch"].status == "error" and "n1: not installed" in checks["torch"].detail
    assert "pip install torch" in checks["torch"].fix
    assert {"transformers", "datasets", "pydantic", "yaml", "job_dir", "hostname"} <= set(checks)
    old = by_name(node_checks(plan, "p", {0: report("n0", version=(3, 8, 0))}, ["n0"]))
    assert old["python"].status == "error"


def test_the_probe_job_asks_for_the_runs_nodes_partition_and_gpus():
    argv = srun_argv(slurm_plan(), "/venv/bin/python", "/shared/x/doctor-probe-1", "fsdp-tui-doctor-1")
    assert argv[0] == "srun" and "--nodes=2" in argv and "--partition=gpu" in argv and "--account=nlp" in argv
    assert "--gpus-per-node=8" in argv and "--label" in argv and "--time=2" in argv
    assert argv[argv.index("-c") - 1] == "/venv/bin/python"


class FakeScheduler:
    """What the doctor asks of a SLURM backend, answered from here."""

    def __init__(self, plan, reach_ok=True, checks=()):
        from launcher.backends.base import NodeInfo, Reach

        self.plan = plan
        self._reach = Reach(0, "node 0", reach_ok, "connected" if reach_ok else "cannot connect: refused")
        self._info = NodeInfo(0, "node 0", "python3", False)
        self.checks = checks
        self.asked = []
        self.closed = False

    def node_info(self, rank):
        return self._info

    async def reach(self, rank, timeout_s):
        return self._reach

    async def scheduler_checks(self, quick):
        self.asked.append(quick)
        return self.checks

    async def close(self):
        self.closed = True


def test_the_doctor_reports_a_slurm_workload_as_one_node_via_the_login(monkeypatch, tmp_path):
    import asyncio

    from launcher.backends.base import SchedulerCheck
    from launcher.doctor import diagnose as d

    plan = slurm_plan()
    fake = FakeScheduler(plan, checks=(SchedulerCheck("sbatch --test-only", "ok", "fine"),
                                       SchedulerCheck("time limit", "error", "too long", "shorten it")))
    monkeypatch.setattr(d, "backend_for", lambda plan, **kw: fake)
    report = asyncio.run(d.diagnose(plan, run_root=plan.node_root, home=tmp_path))
    data = report.to_dict()
    assert [n["label"] for n in data["nodes"]] == ["SLURM via alice@login.cluster.example"]
    assert [c["name"] for c in data["nodes"][0]["checks"]] == ["reachable", "sbatch --test-only", "time limit",
                                                               "secrets"]
    assert data["nodes"][0]["checks"][0]["detail"] == "connected over SSH, host key verified"
    assert not report.ok and fake.asked == [False] and fake.closed


def test_an_unreachable_login_node_asks_the_scheduler_nothing(monkeypatch):
    import asyncio

    from launcher.doctor import diagnose as d

    plan = slurm_plan()
    fake = FakeScheduler(plan, reach_ok=False)
    monkeypatch.setattr(d, "backend_for", lambda plan, **kw: fake)
    report = asyncio.run(d.diagnose(plan, run_root=plan.node_root))
    checks = report.nodes[0].checks
    assert [c.name for c in checks] == ["reachable"] and checks[0].status == "error"
    assert "ssh alice@login.cluster.example" in checks[0].fix and fake.asked == []


def test_a_cpu_only_torch_is_an_error_for_a_gpu_workload():
    checks = by_name(node_checks(slurm_plan(), "p", {0: report("n0", torch="2.13.0+cpu")}, ["n0"]))
    assert checks["torch"].status == "error" and "CUDA build" in checks["torch"].detail
