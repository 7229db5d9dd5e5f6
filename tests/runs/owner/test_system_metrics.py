"""Each node's usage as MLflow system metrics: the names (MLflow's own, per node), what a node's figures
may be, reading the record in bounded slices, a sweep's totals (pure, table-driven); and the tracker
against a real SQLite MLflow store that cannot be opened at first and works later. The real path over
SSH (two nodes, a running job) is in tests/runs/owner/test_system_metrics_ssh.py."""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from pathlib import Path

import pytest

from launcher.backends.agent import probes, usage
from launcher.backends.base import UsageSample
from launcher.events import GpuSample, GpuTelemetry, NodeUsage, RunState, RunStateChanged
from launcher.runs.core.layout import EVENTS, event_line
from launcher.runs.owner import system_metrics
from launcher.runs.owner.system_metrics import SystemMetric, figures_of, metric_key, read_from, to_metrics
from launcher.runs.sweeps.driver import add_totals
from launcher.untrusted import network_figures

H100 = GpuSample(1, "NVIDIA H100 80GB HBM3", 40960.0, 81920.0, 97.0, 350.0, 700.0)
NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: {lo} 10 0 0 0 0 0 0 {lo} 10 0 0 0 0 0 0
  eth0: {rx} 20 0 0 0 0 0 0 {tx} 30 0 0 0 0 0 0
  eth1: 1000000 5 0 0 0 0 0 0 2000000 5 0 0 0 0 0 0
"""


def _line(event, at: float = 1000.0) -> bytes:
    return event_line(event, at).encode()


@pytest.mark.parametrize(("event", "expect"), [
    (NodeUsage("r", 0, 250.0, 1024.0, 3, 999.0, 12.5, 3.0),
     [("job_cpu_utilization_percentage", 250.0), ("job_memory_usage_megabytes", 1024 * 2**20 / 1e6),
      ("job_processes", 3.0), ("network_receive_megabytes", 12.5), ("network_transmit_megabytes", 3.0)]),
    (NodeUsage("r", 0, 250.0, 1024.0, 3, 999.0),   # a node that could not read its traffic
     [("job_cpu_utilization_percentage", 250.0), ("job_memory_usage_megabytes", 1024 * 2**20 / 1e6),
      ("job_processes", 3.0)]),
    (GpuTelemetry("r", 1, (H100,)),
     [("gpu_1_utilization_percentage", 97.0), ("gpu_1_memory_usage_megabytes", 40960 * 2**20 / 1e6),
      ("gpu_1_memory_usage_percentage", 50.0), ("gpu_1_power_usage_watts", 350.0),
      ("gpu_1_power_usage_percentage", 50.0)]),
    (GpuTelemetry("r", 1, (GpuSample(0, "x", 10.0, 0.0, 5.0),)),   # no total: no percentage
     [("gpu_0_utilization_percentage", 5.0), ("gpu_0_memory_usage_megabytes", 10 * 2**20 / 1e6)]),
    (RunStateChanged("r", RunState.RUNNING, 1, ""), []),
])
def test_figures_of_each_sample_named_as_mlflow_names_system_metrics(event, expect):
    got = figures_of(json.loads(_line(event)))
    assert [name for name, _ in got] == [name for name, _ in expect]
    assert all(math.isclose(a, b) for (_, a), (_, b) in zip(got, expect, strict=True))


@pytest.mark.parametrize("entry", [
    {"type": "NodeUsage", "node_rank": 0, "cpu_pct": "lots", "rss_mib": True, "processes": -1, "at": 1.0},
    {"type": "NodeUsage", "node_rank": 0, "cpu_pct": float("nan"), "rss_mib": float("inf"), "at": 1.0},
    {"type": "GpuTelemetry", "node_rank": 0, "gpus": [{"index": True, "utilization_pct": 5}], "at": 1.0},
    {"type": "GpuTelemetry", "node_rank": 0, "gpus": ["x", {"index": "0"}], "at": 1.0},
    {"type": "GpuTelemetry", "node_rank": 0, "gpus": "0", "at": 1.0},
])
def test_figures_a_node_cannot_have_are_left_out(entry):
    assert figures_of(entry) == []


def test_to_metrics_names_each_node_steps_each_node_and_skips_what_is_not_a_sample():
    lines = [_line(NodeUsage("r", 0, 100.0, 10.0, 2, 0.0), 1000.5), _line(NodeUsage("r", 1, 50.0, 20.0, 2, 0.0), 1001.0),
             b"not json", b"[1]", b'{"type": "NodeUsage", "node_rank": true, "cpu_pct": 1, "at": 1}',
             b'{"type": "NodeUsage", "node_rank": 0, "cpu_pct": 1}',  # no time
             _line(RunStateChanged("r", RunState.RUNNING, 1, "")),
             _line(NodeUsage("r", 0, 90.0, 10.0, 2, 0.0), 1002.0), _line(GpuTelemetry("r", 0, (H100,)), 1002.0)]
    steps = {"0/NodeUsage": 5}  # sent before: the steps go on
    got = to_metrics(lines, steps)
    cpu = [m for m in got if m.key.endswith("/job_cpu_utilization_percentage")]
    assert cpu == [SystemMetric("system/node_0/job_cpu_utilization_percentage", 100.0, 1000500, 5),
                   SystemMetric("system/node_1/job_cpu_utilization_percentage", 50.0, 1001000, 0),
                   SystemMetric("system/node_0/job_cpu_utilization_percentage", 90.0, 1002000, 6)]
    assert {m.key for m in got if "gpu" in m.key} == {metric_key(0, f"gpu_1_{n}") for n in (
        "utilization_percentage", "memory_usage_megabytes", "memory_usage_percentage", "power_usage_watts",
        "power_usage_percentage")}
    assert steps == {"0/NodeUsage": 7, "1/NodeUsage": 1, "0/GpuTelemetry": 1}


def test_read_from_returns_whole_lines_in_bounded_slices(tmp_path):
    path = tmp_path / EVENTS
    assert read_from(path, 0) == ([], 0)  # no record yet
    path.write_bytes(b"aaaa\nbbbb\ncccc\ndd")  # "dd" still being written
    assert read_from(path, 0) == ([b"aaaa", b"bbbb", b"cccc"], 15)
    assert read_from(path, 0, max_bytes=7) == ([b"aaaa"], 5)
    assert read_from(path, 5, max_bytes=3) == ([b"bbbb"], 10)  # a line past the window is read whole
    assert read_from(path, 15) == ([], 15)


def test_the_agent_counts_the_nodes_traffic_since_the_jobs_first_sample(tmp_path):
    assert usage.net_bytes(NET_DEV.format(lo=999, rx=5_000_000, tx=1_000_000)) == (6_000_000, 3_000_000)
    assert usage.net_bytes("header\nheader\n  eth0: 1 2 3\n") is None
    assert usage.net_bytes("header\nheader\n  eth0: x 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n") is None
    node_dir, proc = tmp_path / "node", tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    node_dir.mkdir()
    (proc / "net" / "dev").write_text(NET_DEV.format(lo=1, rx=5_000_000, tx=1_000_000))
    first = usage.usage(str(node_dir), [], str(proc), now=10.0)
    assert (first["net_rx_mb"], first["net_tx_mb"]) == (0.0, 0.0)
    (proc / "net" / "dev").write_text(NET_DEV.format(lo=10**9, rx=17_000_000, tx=4_000_000))  # loopback left out
    second = usage.usage(str(node_dir), [], str(proc), now=15.0)
    assert (second["net_rx_mb"], second["net_tx_mb"]) == (12.0, 3.0)
    (proc / "net" / "dev").write_text(NET_DEV.format(lo=1, rx=0, tx=4_000_000))  # eth0 made anew
    assert usage.usage(str(node_dir), [], str(proc), now=20.0)["net_rx_mb"] == 0.0
    (proc / "net" / "dev").unlink()
    assert "net_rx_mb" not in usage.usage(str(node_dir), [], str(proc), now=25.0)


@pytest.mark.parametrize(("reply", "expect"), [
    ({"net_rx_mb": 12.0, "net_tx_mb": 3}, (12.0, 3.0)),
    ({"net_rx_mb": 12.0}, None),
    ({"net_rx_mb": -1.0, "net_tx_mb": 3.0}, None),
    ({"net_rx_mb": float("nan"), "net_tx_mb": 3.0}, None),
    ({"net_rx_mb": True, "net_tx_mb": 3.0}, None),
    ({"net_rx_mb": "12", "net_tx_mb": 3.0}, None),
    ({"net_rx_mb": 1e20, "net_tx_mb": 3.0}, None),
    ("12 MB", None),
])
def test_a_nodes_traffic_is_cleaned_where_it_enters(reply, expect):
    assert network_figures(reply) == expect
    sample = UsageSample.from_wire(reply | {"cpu_pct": 1.0, "rss_mib": 1.0, "processes": 1} if isinstance(reply, dict) else reply)
    if isinstance(reply, dict):
        assert (sample.net_rx_mb, sample.net_tx_mb) == (expect or (None, None))


def test_the_agent_reads_gpu_power_where_nvidia_smi_says_it(tmp_path, monkeypatch):
    """No GPU here: a stand-in ``nvidia-smi`` on PATH prints what one prints (the only mocked part)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '%s' '0, NVIDIA H100 80GB HBM3, 61234, 81559, 97, 612.34, 700.00\n"
                   "1, NVIDIA H100 80GB HBM3, 10, 81559, 0, [N/A], [N/A]\n2, Old GPU, 10, 100, 5\n3, bad\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    got = probes.gpu_samples()
    assert [(g["index"], g.get("power_w"), g.get("power_limit_w")) for g in got] == [
        (0, 612.34, 700.0), (1, None, None), (2, None, None)]
    assert GpuSample(**got[0]).power_w == 612.34  # as the launcher takes it


@pytest.mark.parametrize(("each", "expect"), [
    ([], {}),
    ([{}, {}], {}),                                                      # no variant ran
    ([{"gpu_hours": 2.0, "cost": 6.0}, {"gpu_hours": 1.5, "cost": 4.5}, {}], {"gpu_hours": 3.5, "cost": 10.5}),
    ([{"gpu_hours": 2.0, "cost": 6.0}, {"gpu_hours": 1.0}], {"gpu_hours": 3.0}),   # one unpriced: no cost
    ([{"cpu_hours": 0.25}, {"cpu_hours": 0.5}], {"cpu_hours": 0.75}),
])
def test_a_sweeps_totals_add_its_variants(each, expect):
    assert add_totals(each) == expect


@pytest.mark.slow
def test_a_store_that_was_down_gets_every_nodes_samples_later_in_bounded_batches_once(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from launcher.runs.owner.tracking import Tracker
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    store = tmp_path / "later" / "mlflow.db"
    result = validate_text(f"experiment_name: sys\ncompute: {{hosts: [h0, h1]}}\ncommand: run\n"
                           f"mlflow: {{tracking_uri: 'sqlite:///{store}'}}\n", "w.yaml")
    plan = build_plan(result.workload, run_id="run-sys", node_root="/nodes")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = [_line(NodeUsage("r", rank, 100.0 + i, 10.0, 2, 0.0), 1000.0 + i) for i in range(3) for rank in (0, 1)]
    lines.append(_line(GpuTelemetry("r", 1, (H100,)), 1003.0))
    (run_dir / EVENTS).write_bytes(b"".join(x + b"\n" for x in lines) + lines[0][:10])  # the last line half written

    down = Tracker(tmp_path, plan, run_dir)
    assert not down.sync([], "metrics") and down.error and down.unsent(0)

    store.parent.mkdir()
    monkeypatch.setattr(system_metrics, "READ_MAX_BYTES", 300)  # a few lines a round
    monkeypatch.setattr(system_metrics, "BATCH", 4)
    tracker = Tracker(tmp_path, plan, run_dir)  # as the later sender makes one
    assert tracker.sync([], "metrics")
    calls = []
    real = tracker.sink.client.log_batch
    monkeypatch.setattr(tracker.sink.client, "log_batch", lambda *a, **kw: calls.append(len(kw["metrics"])) or real(*a, **kw))
    assert tracker.sync_system()
    first = json.loads((run_dir / "mlflow.json").read_text())["system"]["offset"]
    assert 0 < first < 300 and tracker.unsent(0)  # one bounded round
    assert tracker.sync_system(to_end=True)
    assert calls and max(calls) <= 4
    assert tracker.unsent(0)  # the half-written line is not sent, nor forgotten
    with open(run_dir / EVENTS, "ab") as f:
        f.write(lines[0][10:] + b"\n")
    assert tracker.sync_system(to_end=True) and not tracker.unsent(0)
    assert tracker.sync_system(to_end=True)  # nothing new: nothing sent twice

    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    history = {key: [(m.step, m.value, m.timestamp) for m in client.get_metric_history(tracker.mlflow_run_id, key)]
               for key in client.get_run(tracker.mlflow_run_id).data.metrics}
    assert sorted(history[metric_key(0, "job_cpu_utilization_percentage")]) == [
        (0, 100.0, 1000000), (1, 101.0, 1001000), (2, 102.0, 1002000), (3, 100.0, 1000000)]
    assert sorted(history[metric_key(1, "job_cpu_utilization_percentage")]) == [
        (0, 100.0, 1000000), (1, 101.0, 1001000), (2, 102.0, 1002000)]
    assert history[metric_key(1, "gpu_1_memory_usage_percentage")] == [(0, 50.0, 1003000)]
    assert not any(key.startswith("system/node_0/gpu") for key in history)
    assert sum(len(v) for v in history.values()) == sum(calls)


def test_metric_names_are_those_of_mlflows_own_monitor():
    """MLflow names a node's system metrics ``system/<node id>/<name>`` and its GPU ones ``gpu_<i>_...``:
    read from its installed monitor's source (not imported: seconds), so a rename there fails here."""
    import importlib.util

    package = Path(importlib.util.find_spec("mlflow").origin).parent / "system_metrics"
    monitor = (package / "system_metrics_monitor.py").read_text()
    assert 'self._metrics_prefix = "system/"' in monitor and 'self.node_id + "/"' in monitor
    gpu = (package / "metrics" / "gpu_monitor.py").read_text()
    for name in ("utilization_percentage", "memory_usage_megabytes", "memory_usage_percentage",
                 "power_usage_watts", "power_usage_percentage"):
        assert f'f"gpu_{{i}}_{name}"' in gpu, name
    network = (package / "metrics" / "network_monitor.py").read_text()
    assert '"network_receive_megabytes"' in network and '"network_transmit_megabytes"' in network
    assert metric_key(3, "x") == "system/node_3/x"


def _ending(tmp_path, uri: str):
    """A run's tracker and its owner's tracking rounds, for a one-node workload logging to ``uri``."""
    from launcher.runs.core.store import RunStore
    from launcher.runs.owner.recorder import Recorder
    from launcher.runs.owner.tracking import Tracker
    from launcher.runs.owner.tracking_rounds import TrackingRounds
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    result = validate_text(f"experiment_name: sys\ncompute: {{hosts: [h0]}}\ncommand: run\n"
                           f"mlflow: {{tracking_uri: '{uri}'}}\n", "w.yaml")
    plan = build_plan(result.workload, run_id="run-end", node_root="/nodes")
    rec = Recorder(RunStore(tmp_path), "run-end", {0: "h0"}, parse_logs=None)
    tracker = Tracker(tmp_path, plan, rec.dir)
    said: list[str] = []
    rounds = TrackingRounds(tmp_path, "run-end", rec.dir, tracker, rec, RunStore(tmp_path),
                            note=lambda _: None, say=said.append)
    return tracker, rounds, said


def _end(rounds) -> float:
    """The owner's end of the run: sent, and waited for within its bound; the seconds it took."""
    started = time.monotonic()

    async def end() -> None:
        await rounds.wait_end(rounds.send_end(RunState.SUCCEEDED))

    asyncio.run(end())
    return time.monotonic() - started


def test_the_runs_end_is_sent_to_a_local_store_another_writer_held_moments_before(tmp_path, monkeypatch):
    """A local store held by another writer when a round ran just before the run ended (another owner, an
    ``mlflow ui`` on the same file) is tried again within the end's bound, not left for a later sender."""
    import fcntl
    import threading

    from mlflow import MlflowClient

    from launcher.runs.core import pending
    from launcher.runs.owner import tracking, tracking_rounds

    store = tmp_path / "mlflow.db"
    tracker, rounds, said = _ending(tmp_path, f"sqlite:///{store}")
    assert tracker.sync([], "metrics")  # the MLflow run is made
    monkeypatch.setattr(tracking, "LOCK_WAIT_S", 0.3)
    monkeypatch.setattr(tracking_rounds, "END_RETRY_S", 0.2)
    other = open(tmp_path / tracking.LOCK_FILE, "a")  # noqa: SIM115 - held across the calls below
    fcntl.flock(other, fcntl.LOCK_EX)
    tracker.ended("FINISHED", None)
    assert not tracker.finish([]) and tracker.waiting and tracker.contended  # the round before the end
    threading.Timer(1.0, other.close).start()  # ... and the other writer lets go a moment later
    took = _end(rounds)
    assert not tracker.unsent(0) and said == [] and took < 30
    run = MlflowClient(tracking_uri=f"sqlite:///{store}").get_run(tracker.mlflow_run_id)
    assert run.info.status == "FINISHED" and pending.why_pending(rounds.dir) is None


def test_what_the_record_gains_while_the_runs_end_is_sent_is_sent_with_it(tmp_path):
    """A node's sample written to the record while the end is being sent (the owner's loop goes on meanwhile)
    is sent with the end, not left marked for a later sender."""
    from mlflow import MlflowClient

    from launcher.runs.core import pending

    store = tmp_path / "mlflow.db"
    tracker, rounds, said = _ending(tmp_path, f"sqlite:///{store}")
    assert tracker.sync([], "metrics")
    finish = tracker.finish

    def finish_as_a_sample_lands(artifacts):
        if not (rounds.dir / EVENTS).exists() or "cpu_pct" not in (rounds.dir / EVENTS).read_text():
            with open(rounds.dir / EVENTS, "a") as events:
                events.write(event_line(NodeUsage("run-end", 0, 42.0, 512.0, 2, time.time())) + "\n")
        return finish(artifacts)

    tracker.finish = finish_as_a_sample_lands
    _end(rounds)
    assert not tracker.unsent(0) and said == [] and pending.why_pending(rounds.dir) is None
    history = MlflowClient(tracking_uri=f"sqlite:///{store}").get_metric_history(
        tracker.mlflow_run_id, metric_key(0, "job_cpu_utilization_percentage"))
    assert [m.value for m in history] == [42.0]


def test_the_runs_end_does_not_wait_on_a_local_store_that_cannot_be_opened(tmp_path):
    from launcher.runs.core import pending

    tracker, rounds, said = _ending(tmp_path, f"sqlite:///{tmp_path / 'not-there' / 'mlflow.db'}")
    assert not tracker.sync([], "metrics") and tracker.waiting and not tracker.contended
    assert _end(rounds) < 10  # not the end's 120 s: it is left for a later sender at once
    assert pending.why_pending(rounds.dir) and said and "sent later" in said[-1]


def test_the_runs_end_does_not_wait_on_a_remote_store_that_refused(tmp_path, monkeypatch):
    from launcher.runs.owner import tracking_rounds

    tracker, rounds, _said = _ending(tmp_path, "http://127.0.0.1:9")
    monkeypatch.setattr(tracking_rounds, "TRACKING_END_S", 5.0)
    tracker.ended("FINISHED", None)
    started = time.monotonic()
    assert not rounds._send_end() and "9" in (tracker.error or "")
    assert time.monotonic() - started < 5.0  # refused at once: not asked again before a later sender
