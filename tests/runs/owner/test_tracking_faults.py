"""Tracking is not the job: concurrent first launches share one fresh MLflow store, and a store that cannot
be written leaves the run to train to its end, saying so (real CLI, real MLflow on SQLite)."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli, cli_env, events, wait_tracked, write_workload

pytestmark = pytest.mark.slow
STEPS = 5
COMMAND = f"""command: |
  for i in $(seq 1 {STEPS}); do echo "step=$i/{STEPS} loss=0.$((9 - i))"; sleep 0.1; done
"""


def test_four_launches_at_the_same_moment_on_a_fresh_data_dir_all_succeed_and_are_tracked(home, tmp_path):
    wl = write_workload(tmp_path, "experiment_name: concurrent\n" + COMMAND)
    procs = [subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=cli_env(home), cwd=ROOT) for _ in range(4)]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-2000:] + err[-2000:]
        assert "tracking (MLflow) failed" not in out and "Traceback" not in err
    run_ids = {events(out)[0]["run_id"] for out, _ in outs}
    assert len(run_ids) == 4

    from mlflow import MlflowClient

    wait_tracked(home, *run_ids)
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("concurrent").experiment_id])
    assert {r.info.run_name for r in runs} == run_ids
    for run in runs:
        assert run.info.status == "FINISHED"
        assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == list(range(1, STEPS + 1))


def test_an_unwritable_tracking_store_leaves_the_run_to_finish_and_says_tracking_failed(home, tmp_path):
    (home / "mlflow.db").mkdir()  # where the SQLite file should be: nothing can open it
    wl = write_workload(tmp_path, "experiment_name: untracked\n" + COMMAND)
    out = cli(home, "run", wl, "--json", timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    evs = events(out.stdout)
    assert evs[-1]["type"] == "RunFinished" and evs[-1]["state"] == "succeeded"
    steps = [e["record"]["step"] for e in evs if e["type"] == "MetricsRecorded"]
    assert steps == list(range(1, STEPS + 1))
    said = [e.get("detail", "") for e in evs if e["type"] == "RunStateChanged"]
    assert any("tracking (MLflow) failed" in d for d in said), said
    assert "Traceback" not in out.stderr
