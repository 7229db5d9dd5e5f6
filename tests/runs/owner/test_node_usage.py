"""What a node's job costs (CPU use, RSS, processes): sampled by the agent from /proc, cleaned where it
enters the launcher, recorded by the run's owner as ``NodeUsage``. The real path over SSH is covered by
the 32-host test (tests/backends/ssh/test_scale.py)."""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path

import pytest

from launcher.backends.agent import usage
from launcher.backends.base import UsageSample
from launcher.events import RunState
from launcher.runs.core.store import RunStore
from launcher.runs.owner.policy import RunPolicy
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.settings import Settings
from launcher.untrusted import usage_figures
from tests.support.fake_backend import FakeBackend, FakeNode
from tests.support.policy_cases import FAST, fake_plan

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int, comm: str, utime: int, stime: int, cutime: int, cstime: int, rss_pages: int) -> str:
    """A /proc/PID/stat line in the kernel's layout (fields 14-17 CPU ticks, 24 RSS pages)."""
    rest = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", "0", "0", "0", "0",
            str(utime), str(stime), str(cutime), str(cstime), "20", "0", "1", "0", "100", "4096", str(rss_pages)]
    return f"{pid} ({comm}) {' '.join(rest)} 0 0 0\n"


def _fake_proc(tmp_path, stats: dict[int, str]):
    proc = tmp_path / "proc"
    for pid, line in stats.items():
        (proc / str(pid)).mkdir(parents=True, exist_ok=True)
        (proc / str(pid) / "stat").write_text(line)
    return proc


def test_a_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses():
    line = _stat(7, "evil) 1 2 (x", 100, 50, 30, 20, 256)
    cpu_s, rss = usage.process_cost(line, 1.0 / TICK, PAGE)
    assert cpu_s == pytest.approx(200 / TICK) and rss == 256 * PAGE
    assert usage.process_cost("7 (short) S 1", 1.0 / TICK, PAGE) is None
    mine = usage.process_cost(Path(f"/proc/{os.getpid()}/stat").read_text(), 1.0 / TICK, PAGE)  # this process
    assert mine is not None and mine[0] > 0 and mine[1] > 1 << 20


@pytest.mark.parametrize(("previous", "cpu_s", "at", "expect"), [
    (None, 5.0, 10.0, None),                                   # the first ask: nothing to compare
    ({"cpu_s": 1.0, "at": 8.0}, 5.0, 10.0, 200.0),             # 4 CPU seconds in 2 s: two cores
    ({"cpu_s": 1.0, "at": 8.0}, 1.5, 10.0, 25.0),
    ({"cpu_s": 9.0, "at": 8.0}, 5.0, 10.0, 0.0),               # a process left the tree: 0, never less
    ({"cpu_s": 1.0, "at": 10.0}, 5.0, 10.0, None),             # no time passed (or the clock went back)
    ({"cpu_s": "x", "at": 8.0}, 5.0, 10.0, None),              # a damaged file
    ({"at": 8.0}, 5.0, 10.0, None),
])
def test_cpu_use_is_the_trees_cpu_time_over_the_wall_time_between_asks(previous, cpu_s, at, expect):
    got = usage.cpu_pct(previous, cpu_s, at)
    assert got == (None if expect is None else pytest.approx(expect))


def test_the_tree_is_summed_and_the_previous_sample_is_kept_in_the_run_directory(tmp_path):
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    proc = _fake_proc(tmp_path, {10: _stat(10, "torchrun", 100, 0, 0, 0, 1000),
                                 11: _stat(11, "python", 300, 100, 0, 0, 3000)})
    first = usage.usage(str(node_dir), [10, 11, 12], str(proc), now=100.0)  # 12 ended meanwhile
    assert first["cpu_pct"] is None and first["processes"] == 2
    assert first["rss_mib"] == pytest.approx(4000 * PAGE / 2**20)
    assert json.loads((node_dir / usage.USAGE_FILE).read_text())["at"] == 100.0
    # 11 ended and was reaped by 10 (its time moved to 10's cutime/cstime); 10 spent 2 s itself
    _fake_proc(tmp_path, {10: _stat(10, "torchrun", 100 + 2 * TICK, 0, 300, 100, 1000)})
    (proc / "11" / "stat").unlink()
    second = usage.usage(str(node_dir), [10, 11], str(proc), now=104.0)
    assert second["processes"] == 1
    assert second["cpu_pct"] == pytest.approx(50.0)  # 2 s of CPU over 4 s: the reaped child's time is not lost


@pytest.mark.parametrize(("reply", "expect"), [
    ({"cpu_pct": 95.5, "rss_mib": 300.0, "processes": 3, "at": 1.7e9}, (95.5, 300.0, 3, 1.7e9)),
    ({"cpu_pct": 0, "rss_mib": 0, "processes": 0, "at": 1.7e9}, (0.0, 0.0, 0, 1.7e9)),
    ({"cpu_pct": 10.0, "rss_mib": 1.0, "processes": 1}, (10.0, 1.0, 1, 0.0)),      # no time said: 0.0
    ({"cpu_pct": 10.0, "rss_mib": 1.0, "processes": 1, "at": "now"}, (10.0, 1.0, 1, 0.0)),
    ({"cpu_pct": None, "rss_mib": 1.0, "processes": 1, "at": 1.0}, None),          # the node's first sample
    ({"cpu_pct": math.nan, "rss_mib": 1.0, "processes": 1}, None),
    ({"cpu_pct": math.inf, "rss_mib": 1.0, "processes": 1}, None),
    ({"cpu_pct": -1.0, "rss_mib": 1.0, "processes": 1}, None),
    ({"cpu_pct": 1e9, "rss_mib": 1.0, "processes": 1}, None),                      # past 4,096 cores
    ({"cpu_pct": 1.0, "rss_mib": 1e12, "processes": 1}, None),
    ({"cpu_pct": True, "rss_mib": 1.0, "processes": 1}, None),
    ({"cpu_pct": "95", "rss_mib": 1.0, "processes": 1}, None),
    ({"cpu_pct": 1.0, "rss_mib": 1.0, "processes": 2.5}, None),
    ({"cpu_pct": 1.0, "rss_mib": 1.0, "processes": -1}, None),
    ({"cpu_pct": 1.0, "rss_mib": 1.0, "processes": True}, None),
    ({"cpu_pct": 1.0, "rss_mib": 1.0, "processes": 1 << 40}, None),
    ("95%", None),
    (None, None),
])
def test_a_nodes_usage_reply_is_cleaned_where_it_enters(reply, expect):
    assert usage_figures(reply) == expect
    sample = UsageSample.from_wire(reply)
    assert (sample is None) if expect is None else (sample == UsageSample(*expect))


def test_the_owner_records_each_nodes_usage_and_none_where_a_node_has_no_figure(tmp_path):
    plan = fake_plan(2)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "h0", 1: "h1"}, parse_logs=None)
    nodes = [FakeNode(usage=UsageSample(97.5, 310.0, 4, 1.7e9), polls_before_exit=3), FakeNode(polls_before_exit=3)]
    policy = RunPolicy(FakeBackend(plan, nodes), rec, Settings(**FAST), secrets=dict, cancel_requested=lambda: False)
    assert asyncio.run(policy.run()).state == RunState.SUCCEEDED
    lines = (tmp_path / "runs" / plan.run_id / "events.jsonl").read_text().splitlines()
    usage_events = [json.loads(line) for line in lines if '"NodeUsage"' in line]
    assert usage_events, lines
    assert {e["node_rank"] for e in usage_events} == {0}
    first = usage_events[0]
    assert (first["cpu_pct"], first["rss_mib"], first["processes"], first["sampled_at"]) == (97.5, 310.0, 4, 1.7e9)


def test_a_slurm_node_task_samples_its_jobs_usage_into_the_shared_directory(tmp_path, monkeypatch):
    """The launcher cannot reach a compute node: its task writes the job's usage where the login node
    reads it. The job here is a real tagged process on this machine."""
    import subprocess
    import threading
    import time

    from launcher.backends.agent import slurm_task

    monkeypatch.setattr(slurm_task, "GPU_EVERY_S", 0.2)
    monkeypatch.setattr(slurm_task, "SIGNAL_POLL_S", 0.05)
    run_id = f"usage-{os.getpid()}-{time.time_ns()}"
    job = subprocess.Popen(["sleep", "60"], env={**os.environ, "FSDP_TUI_RUN_ID": run_id, "NODE_RANK": "0"})
    node_dir = tmp_path / "node-0"
    node_dir.mkdir()
    done = threading.Event()
    spec = {"attempt": 1, "env": {"FSDP_TUI_RUN_ID": run_id}, "builtin_trainer": False}
    watcher = threading.Thread(target=slurm_task._watch, args=(str(node_dir), str(tmp_path), spec, 0, done))
    watcher.start()
    sample, deadline = {}, time.monotonic() + 20
    try:
        while sample.get("cpu_pct") is None and time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                sample = json.loads((node_dir / slurm_task.USAGE_SAMPLE_FILE).read_text())
            except (OSError, ValueError):
                pass
    finally:
        done.set()
        watcher.join()
        job.kill()
        job.wait()
    assert sample.get("cpu_pct") is not None, sample  # the second sample: a CPU figure
    assert sample["processes"] == 1 and 0 < sample["rss_mib"] < 100, sample
    assert UsageSample.from_wire(sample) is not None


class _Link:
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def call(self, op: str, body: bytes = b"", **fields):
        assert (op, fields["name"]) == ("read", "usage-sample.json")
        return {"ok": True}, self.data


@pytest.mark.parametrize(("written", "expect"), [
    ({"cpu_pct": 12.5, "rss_mib": 40.0, "processes": 3, "age": 1.0}, (12.5, 40.0, 3)),
    ({"cpu_pct": 12.5, "rss_mib": 40.0, "processes": 3, "age": 600.0}, None),   # the task stopped sampling
    ({"cpu_pct": None, "rss_mib": 40.0, "processes": 3, "age": 1.0}, None),      # its first sample
    ({"cpu_pct": "\x1b]52;c;evil\x07", "rss_mib": 40.0, "processes": 3, "age": 1.0}, None),
    (b"not json", None),
    (b"", None),
])
def test_the_slurm_backend_reads_the_tasks_usage_sample_cleaned_and_fresh(written, expect):
    import time

    from launcher.backends.slurm.backend import SlurmBackend
    from tests.support.slurm_workload import slurm_plan

    if isinstance(written, dict):
        age = written.pop("age")
        written = json.dumps({**written, "at": time.time() - age}).encode()
    backend = SlurmBackend(slurm_plan())
    backend.fleet.links[0] = _Link(written)
    got = asyncio.run(backend.usage(0))
    assert (got is None) if expect is None else ((got.cpu_pct, got.rss_mib, got.processes) == expect)
