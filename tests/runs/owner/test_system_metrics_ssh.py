"""Every node of a 2-node run over real SSH in the run's one MLflow run (SQLite): the agents' usage samples
reach MLflow as system metrics named per node while the job runs, and all of them by the run's end."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys

import pytest

from launcher.runs.owner.system_metrics import metric_key
from tests.support.cli import FSDP_TUI, ROOT, cli_env, tagged, wait_tracked, wait_until, write_workload

pytestmark = pytest.mark.slow

USAGE = ("job_cpu_utilization_percentage", "job_memory_usage_megabytes", "job_processes", "network_receive_megabytes",
         "network_transmit_megabytes")


def _keys(db, run_id: str) -> set[str]:
    """The metric keys the store holds for the run (read with sqlite3 while the owner writes: no MLflow)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
            return {k for (k,) in con.execute("SELECT DISTINCT key FROM metrics WHERE run_uuid = ?", (run_id,))}
    except sqlite3.Error:
        return set()  # not created yet, or busy this moment


def test_every_node_of_a_two_node_ssh_run_is_in_its_mlflow_run(home, tmp_path, ns_hosts):
    from mlflow import MlflowClient

    client, _started = ns_hosts
    stop = tmp_path / "stop"
    wl = write_workload(tmp_path, f"""experiment_name: system-metrics
compute: {{accelerator_type: CPU, procs_per_node: 1, hosts: [node0, node1]}}
environment: {{python: {sys.executable}}}
command: |
  while [ ! -e {stop} ]; do sleep 0.2; done
""")
    with open(tmp_path / "run.out", "w") as out:
        proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=out, stderr=subprocess.STDOUT,
                                env=cli_env(home, HOME=str(client)), cwd=ROOT)
    try:
        run_dir = wait_until(lambda: next((home / "runs").glob("*/mlflow.json"), None), 120,
                             "the run's MLflow run").parent
        mlflow_id = json.loads((run_dir / "mlflow.json").read_text())["run_id"]
        wanted = {metric_key(rank, name) for rank in (0, 1) for name in USAGE}
        # Sent by the owner while the job runs (the agents sample every few seconds; the first has no CPU figure).
        wait_until(lambda: wanted <= _keys(home / "mlflow.db", mlflow_id), 120, "every node's system metrics in MLflow")
    finally:
        stop.touch()
        code = proc.wait(timeout=180)
    said = (tmp_path / "run.out").read_text()
    assert code == 0, said[-3000:]
    run_id = run_dir.name
    wait_tracked(home, run_id)  # `run` returns once the end is recorded; the owner sends it to MLflow after
    store = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    run = store.get_run(mlflow_id)
    assert run.info.status == "FINISHED" and run.data.tags["fsdp_tui.run_id"] == run_id
    recorded = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    for rank in (0, 1):
        samples = [e for e in recorded if e["type"] == "NodeUsage" and e["node_rank"] == rank]
        cpu = store.get_metric_history(mlflow_id, metric_key(rank, "job_cpu_utilization_percentage"))
        # every sample recorded is in MLflow once, in order, at the time it was recorded
        assert [(m.step, m.value, m.timestamp) for m in sorted(cpu, key=lambda m: m.step)] == [
            (i, e["cpu_pct"], int(e["at"] * 1000)) for i, e in enumerate(samples)]
        rss = store.get_metric_history(mlflow_id, metric_key(rank, "job_memory_usage_megabytes"))
        procs = store.get_metric_history(mlflow_id, metric_key(rank, "job_processes"))
        assert all(m.value > 0 for m in rss) and all(1 <= m.value <= 4 for m in procs), (rss, procs)
        received = [m.value for m in sorted(store.get_metric_history(
            mlflow_id, metric_key(rank, "network_receive_megabytes")), key=lambda m: m.step)]
        assert received == [e["net_rx_mb"] for e in samples] and received == sorted(received)  # counted up
    assert json.loads((run_dir / "mlflow.json").read_text())["system"]["offset"] == (run_dir / "events.jsonl").stat().st_size
    assert tagged(run_id) == []
