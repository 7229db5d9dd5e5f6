"""MlflowSink against a real SQLite tracking store: params, metric history, the samples table, artifacts,
final status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.runs.owner.mlflow_sink import MlflowSink
from trainer.wire.fit_record import FitSummary
from trainer.wire.protocol import MetricRecord, RankMemory, ResumeCheck


@pytest.mark.slow
def test_params_metrics_artifacts_and_status(tmp_path):
    from mlflow import MlflowClient

    sink = MlflowSink(None, "exp-a", "run-1", tmp_path)
    run_id = sink.start({"model": {"name": "tiny", "lr": 0.001}, "long": "x" * 9000})
    sink.log_records([MetricRecord(step=s, max_steps=3, loss=3.0 - s, lr=1e-3, time=1000.0 + s, mfu=0.3 if s > 1 else None,
                                   router_aux_loss=2.0 + s / 10 if s == 2 else None) for s in (1, 2, 3)]
                     + [MetricRecord(step=3, kind="eval", eval_loss=0.5, time=1004.0)]
                     + [ResumeCheck("differs", 2, differs=("seed: 42 in the checkpoint, 7 now",)).record(),
                        ResumeCheck("verified", 3).record()]  # a resume's badge as tags: the newest wins
                     + [FitSummary(expected_gib=0.62, need_gib=0.62, device="cpu", sharding="full_shard", world=2).record(),
                        MetricRecord(step=4, time=1005.0, memory=(RankMemory(0, rss_gib=0.6, peak_rss_gib=0.66),
                                                                  RankMemory(1, rss_gib=0.6, peak_rss_gib=0.7)))])
    from trainer.wire.samples import Sample, SampleSet

    sink.log_samples([SampleSet(0, (Sample("Add 2 + 3.", "zz"), Sample("Reverse: abc", "zz", "cba")))])
    sink.log_samples([SampleSet(4, (Sample("Add 2 + 3.", "5"),))])  # appended to the same table
    artifact = tmp_path / "triage.json"
    artifact.write_text("{}")
    sink.finish("FAILED", [artifact, tmp_path / "absent.json"], {"gpu_hours": 16.0, "cost": 40.0})

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(run_id)
    assert run.info.status == "FAILED" and run.info.run_name == "run-1"
    assert run.data.params["model.name"] == "tiny" and run.data.params["model.lr"] == "0.001"
    assert len(run.data.params["long"]) <= 6000
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [(1, 2.0), (2, 1.0), (3, 0.0)]
    assert client.get_metric_history(run_id, "eval_loss")[0].value == 0.5
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "router_aux_loss")] == [(2, 2.2)]
    assert run.data.metrics["gpu_hours"] == 16.0 and run.data.metrics["cost"] == 40.0
    assert (run.data.tags["fsdp_tui.resume_check"], run.data.tags["fsdp_tui.resume_differs"]) == ("verified", "nothing")
    # the memory prediction beside each rank's measured peak
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "memory/predicted_gib")] == [(0, 0.62)]
    assert run.data.metrics["memory/rank1/peak_rss_gib"] == 0.7
    assert run.data.tags["fsdp_tui.memory_predicted"].startswith("0.62 GiB a rank predicted")
    # MFU beside what it counts (model FLOPs: a LoRA run's frozen base does no weight-gradient work)
    assert run.data.metrics["mfu"] == 0.3 and run.data.tags["fsdp_tui.mfu_convention"].startswith(
        "model FLOPs (forward 2N + activation gradients 2N + weight gradients 2T per token")
    run_b = sink.start({})
    sink.log_records([ResumeCheck("differs", 2, differs=("seed: 42 in the checkpoint, 7 now",)).record()])
    tags = client.get_run(run_b).data.tags
    assert "fsdp_tui.mfu_convention" not in tags  # a run that reported no MFU names no convention
    assert (tags["fsdp_tui.resume_check"], tags["fsdp_tui.resume_differs"]) == ("differs", "seed: 42 in the checkpoint, 7 now")
    assert [a.path for a in client.list_artifacts(run_id)] == ["samples.json", "triage.json"]
    table = json.loads(Path(client.download_artifacts(run_id, "samples.json", str(tmp_path / "dl"))).read_text())
    assert table["columns"] == ["step", "prompt", "answer", "reference"]
    assert table["data"] == [[0, "Add 2 + 3.", "zz", ""], [0, "Reverse: abc", "zz", "cba"], [4, "Add 2 + 3.", "5", ""]]
    assert (tmp_path / "mlflow-artifacts").is_dir()


@pytest.mark.slow
def test_an_owner_killed_after_mlflow_made_its_run_leaves_one_run_that_its_adopter_carries_on(tmp_path):
    """The window between MLflow making a launch's run and the owner noting its id in ``mlflow.json``: the
    next owner finds the run by its launch tag instead of starting a second one; another launch gets its own."""
    from mlflow import MlflowClient

    from launcher.runs.owner.tracking import RUN_TAG, Tracker
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    result = validate_text("experiment_name: adopt\ncompute: {hosts: [h0]}\ncommand: run\n", "w.yaml")
    plans = [build_plan(result.workload, run_id=run_id, node_root="/nodes") for run_id in ("run-o'1", "run-2")]
    run_dirs = [tmp_path / "runs" / str(i) for i in range(2)]
    for directory in run_dirs:
        directory.mkdir(parents=True)
    killed = Tracker(tmp_path, plans[0], run_dirs[0])
    made = killed._sink().start(plans[0].workload.parameters, {RUN_TAG: plans[0].run_id}, key=RUN_TAG)
    assert killed.mlflow_run_id is None  # the owner died here: mlflow.json never named the run

    adopter = Tracker(tmp_path, plans[0], run_dirs[0])
    assert adopter.sync([MetricRecord(step=1, max_steps=2, loss=2.0, time=1000.0)], "metrics"), adopter.error
    assert adopter.mlflow_run_id == made
    other = Tracker(tmp_path, plans[1], run_dirs[1])
    assert other.sync([], "metrics"), other.error
    assert other.mlflow_run_id not in (None, made)

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("adopt").experiment_id])
    assert sorted(r.data.tags[RUN_TAG] for r in runs) == ["run-2", "run-o'1"]
    assert [m.value for m in client.get_metric_history(made, "loss")] == [2.0]
