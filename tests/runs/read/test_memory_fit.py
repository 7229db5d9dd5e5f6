"""A run's memory prediction beside what its ranks measured, as the monitor (``RunView``) and ``show``
(``run_report``) read it from the run's records: a real run folder and store, no job."""

from __future__ import annotations

from launcher.events import MetricsRecorded
from launcher.runs.read.view import RunView
from trainer.wire.fit_record import FitSummary
from trainer.wire.protocol import MetricRecord, RankMemory

FIT = FitSummary(expected_gib=0.62, need_gib=0.62, device="cpu", sharding="full_shard", world=2, memory_gib=11.8,
                 parts={"params": 0.01, "activations": 0.1})


def _train(step: int, *peaks: float) -> MetricRecord:
    return MetricRecord(step=step, kind="train", max_steps=10, time=1000.0 + step,
                        memory=tuple(RankMemory(r, rss_gib=p - 0.05, peak_rss_gib=p) for r, p in enumerate(peaks)))


def test_the_monitor_shows_the_prediction_beside_the_highest_peak():
    view = RunView("r")
    assert view.memory_words() == ""  # nothing predicted: nothing shown
    view.apply(MetricsRecorded("r", FIT.record()), now=1000.0)
    assert "no rank has reported its peak yet" in view.memory_words()
    view.apply(MetricsRecorded("r", _train(1, 0.55, 0.71)), now=1001.0)
    assert view.memory_words() == ("memory: peak 0.71 GiB (rank 1 of 2) against 0.62 GiB predicted (+15%; full_shard),"
                                   " needs ~0.6 GiB of 11.8 a rank")


def test_show_reads_the_prediction_at_the_start_and_the_peaks_at_the_end(tmp_path, monkeypatch):
    from launcher.runs.launch import create_run
    from launcher.runs.read.report import run_report
    from launcher.workload.model import Workload
    from launcher.workload.plan import build_plan

    monkeypatch.setenv("FSDP_TUI_HOME", str(tmp_path))
    workload = Workload.model_validate({"experiment_name": "m", "compute": {"accelerator_type": "CPU", "procs_per_node": 2},
                                        "parameters": {"model_name": "builtin:tiny-llama", "dataset_name": "d",
                                                       "output_dir": "o"}})
    directory = create_run(build_plan(workload, run_id="m-1"), tmp_path)
    lines = [FIT.record(), *(_train(s, 0.5 + s / 100, 0.4) for s in range(1, 400))]
    (directory / "metrics.jsonl").write_text("".join(r.to_json() + "\n" for r in lines))
    memory = run_report(tmp_path, "m-1").to_dict()["memory"]  # as show --json prints it
    assert memory["predicted_gib"] == 0.62 and memory["peak_gib"] == 0.5 + 399 / 100 and memory["peak_rank"] == 0
    assert memory["text"].startswith("peak 4.49 GiB (rank 0 of 2) against 0.62 GiB predicted")
