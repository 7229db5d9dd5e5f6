"""A node of a SLURM job dies and the run goes on: a real 3-node cluster (tests/support/slurm_cluster.py), a
2-node job, ``recovery: {max_swaps: 1}``. Node 1's task processes are killed (as a dying node's are);
SLURM's own line names the node, fsdp-tui excludes it and submits the next job, which SLURM places on the
other two nodes; the job's script resumes from its own checkpoint (the built-in trainer's resume on SLURM is
tested in test_slurm.py, a swap's resume check in tests/runs/owner/test_recovery_runs.py)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.support.cli import events, tagged, wait_until
from tests.support.slurm_runs import (
    RESUMING,
    first_event,
    job_of,
    node_file,
    node_pids,
    slurm_popen,
    workload,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slurm3(tmp_path_factory):
    """The test cluster with a third node: a replacement for the one that fails."""
    from tests.support.slurm_cluster import start_cluster, stop_cluster

    try:
        cluster = start_cluster(tmp_path_factory.mktemp("slurm3"), nodes=3)
    except RuntimeError as err:
        pytest.skip(str(err))
    yield cluster
    stop_cluster(cluster)


def test_a_node_killed_in_a_slurm_job_is_excluded_and_the_next_job_goes_on_elsewhere(home, tmp_path, slurm3):
    slurm3.wait_idle()
    body = RESUMING.replace("  start=$(", '  echo "node $NODE_RANK on $(hostname)"\n  start=$(') + "recovery: {max_swaps: 1}\n"
    proc = slurm_popen(home, slurm3, "run", workload(tmp_path, slurm3, body), "--json")
    try:
        run_id = first_event(proc)
        job = job_of(slurm3, run_id)
        metrics = node_file(slurm3, run_id, 0, "metrics.jsonl")
        wait_until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 5, 90,
                   "a checkpoint and a few steps")
        log1 = node_file(slurm3, run_id, 1, "node.log").read_text()
        failed = log1.split("node 1 on ")[1].split()[0]  # where SLURM put node 1
        for pid in node_pids(slurm3, job, 1):
            os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
    evs = events(out)
    assert proc.returncode == 0 and evs[-1]["state"] == "succeeded", out[-3000:]
    swaps = json.loads((home / "runs" / run_id / "swaps.json").read_text())["swaps"]
    assert len(swaps) == 1, swaps
    swap = swaps[0]
    assert (swap["kind"], swap["node_rank"], swap["failed_host"], swap["signature"]) == ("exclude", 1, failed, "killed")
    assert swap["text"].startswith(f"node 1 ({failed}) killed at step ") and "excluded, the next job gets another " \
                                                                             "node in its place" in swap["text"]
    assert (swap["verdict"], swap["recovered"]) == ("unchecked", False)  # a script's own resume: nothing proves it
    assert "went on, first step after" in swap["text"] and "(the workload's own resume, not checked)" in swap["text"]
    jobs = json.loads(node_file(slurm3, run_id, 0, "jobs.json").read_text())
    assert set(jobs) == {"1", "2"} and jobs["1"] != jobs["2"]  # a new submission, not SLURM's own requeue
    script = node_file(slurm3, run_id, 0, "job-2.sbatch").read_text()
    assert f"#SBATCH --exclude={failed}" in script and "#SBATCH --nodes=2" in script, script
    # The next job ran on the two nodes left, and every node resumed from the script's checkpoint.
    for rank in (0, 1):
        second = (home / "runs" / run_id / "nodes" / f"{rank}.log").read_text().split("=== fsdp-tui: attempt 2")[1]
        placed = second.split(f"node {rank} on ")[1].split()[0]
        assert placed != failed and placed in slurm3.node_names, second[:500]
        assert "resumed from step" in second and second.count(f"step 12 of node {rank}") == 1
    plan = json.loads((home / "runs" / run_id / "plan.json").read_text())
    assert plan["workload"]["compute"]["slurm"]["exclude"] == [failed]
    transitions = [e.get("detail", "") for e in evs if e["type"] == "RunStateChanged"]
    assert any(d.startswith(f"attempt 2 on other nodes: node 1 ({failed}) killed") for d in transitions), transitions
    deadline = time.monotonic() + 30
    while tagged(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tagged(run_id) == []
