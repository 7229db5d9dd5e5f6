"""Faults on a node's own disk, for real: the node's run root on a 2 MB tmpfs that the job fills."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.support.cli import cli, events, tagged, write_workload

pytestmark = pytest.mark.slow


@pytest.fixture
def tiny_disk(home):
    """The data dir's ``nodes/`` (where a run on this machine keeps its node folders) on a 2 MB tmpfs."""
    where = home / "nodes"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_node_whose_disk_fills_fails_the_run_at_once_naming_node_and_no_space(home, tmp_path, tiny_disk):
    wl = write_workload(tmp_path, """experiment_name: disk-full
mlflow: {enabled: false}
command: |
  echo started
  head -c 4000000 /dev/zero > filler 2>/dev/null
  while true; do echo "a line of output that has nowhere to go"; sleep 0.01; done
""")
    out = cli(home, "run", wl, "--json", timeout=120)
    evs = events(out.stdout)
    run_id = evs[0]["run_id"]
    try:
        assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
        end = evs[-1]
        assert end["type"] == "RunFinished" and end["state"] == "failed"
        summary = end["triage"]["summary"]
        assert end["triage"]["signature"] == "no_space" and end["triage"]["node_rank"] == 0, end["triage"]
        assert "node 0" in summary and "no space" in summary.lower(), summary
        assert str(tiny_disk) in summary and "MiB free" in summary, summary
        assert "Traceback" not in out.stdout + out.stderr
        deadline = time.monotonic() + 20
        while tagged(run_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert tagged(run_id) == []

        cancel = cli(home, "cancel", run_id)
        assert cancel.returncode == 1 and "already ended (failed)" in cancel.stderr
        assert "no space" in cancel.stderr.lower() and "Traceback" not in cancel.stderr, cancel.stderr
        show = json.loads(cli(home, "runs", "--json").stdout)[0]
        assert show["state"] == "failed"
    finally:
        for pid in tagged(run_id):
            os.kill(pid, 9)


def test_launching_onto_a_full_disk_names_the_node_and_the_disk_without_a_traceback(home, tmp_path, tiny_disk):
    subprocess.run(["sh", "-c", f"head -c 4000000 /dev/zero > {tiny_disk / 'filler'}"], capture_output=True)
    wl = write_workload(tmp_path, "experiment_name: disk-already-full\nmlflow: {enabled: false}\ncommand: echo never\n")
    out = cli(home, "run", wl, "--json", timeout=120)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    end = events(out.stdout)[-1]
    assert end["type"] == "RunFinished" and end["state"] == "failed"
    assert end["triage"]["signature"] == "no_space" and end["triage"]["node_rank"] == 0, end["triage"]
    summary = end["triage"]["summary"]
    assert summary.startswith("node 0 (this machine): ") and "no space left on device" in summary, summary
    assert str(tiny_disk) in summary and "MiB free" in summary, summary
    assert "Traceback" not in out.stdout + out.stderr


def test_a_disk_that_fills_as_the_job_starts_is_said_at_once_by_the_start(tiny_disk):
    """The disk is left one page of room: the job's "starting" state takes it, so the supervisor cannot
    record the job as running (it filled right at the start, before that write). The start answers with
    the disk's words at once (not "did not start" after its timeout), and the job is not left running."""
    from launcher.backends.agent import jobs

    node_dir = tiny_disk / "run" / "node-0"
    node_dir.mkdir(parents=True)
    room = os.statvfs(tiny_disk)
    with open(tiny_disk / "filler", "wb") as f:
        f.write(b"\0" * ((room.f_bavail - 1) * room.f_frsize))
    tag = f"disk-at-start-{os.getpid()}"
    spec = {"argv": ["sleep", "300"], "env": {"FSDP_TUI_RUN_ID": tag, "NODE_RANK": "0"}, "attempt": 1}
    began = time.monotonic()
    answer = jobs.start(str(node_dir), spec, jobs.agent_argv("unused.zip"))
    try:
        assert answer["state"] == "exited", answer
        assert "no space left on device" in answer["error"] and str(node_dir) in answer["error"], answer
        assert time.monotonic() - began < jobs.START_TIMEOUT_S, "answered by the start, not its timeout"
        deadline = time.monotonic() + 30
        while tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert tagged(tag) == []
    finally:
        for pid in tagged(tag):
            os.kill(pid, 9)


@pytest.mark.parametrize("failing", [0, 2])
def test_one_nodes_agent_error_names_that_node_for_the_triage(failing):
    """An agent's own error (its disk full as the job starts, say) comes without a rank: the fleet, which
    asked each node, gives the one that failed its rank, so the run's triage points at it."""
    import asyncio

    from launcher.backends.agent_client import AgentError
    from launcher.backends.base import NodeError
    from launcher.backends.fleet import AgentFleet
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    result = validate_text("experiment_name: three\ncompute: {hosts: [a, b, c]}\ncommand: run\n", "w.yaml")
    fleet = AgentFleet(build_plan(result.workload, run_id="run-three", node_root="/nodes"))

    async def call(rank: int) -> None:
        if rank == failing:
            raise AgentError(f"node {rank} ({'abc'[rank]}): start: no space left on device")

    with pytest.raises(NodeError) as raised:
        asyncio.run(fleet._every_nodes(call, [0, 1, 2]))
    assert raised.value.node_rank == failing and "no space" in str(raised.value)
