"""A run's report is typed through and through: its MLflow link, what it trained on, its notifications, the
checkpoint it started from and the newest interconnect test of its nodes are types (no JSON parts), and
``show --json`` writes them as it always has (the JSON below is what the report wrote when they were JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.events import RunState
from launcher.notify.deliver import Delivery
from launcher.runs.core.gathers import Gather, GatherNote
from launcher.runs.core.layout import save_plan
from launcher.runs.core.store import RunStore
from launcher.runs.read.report import RunReport, run_report
from launcher.runs.read.report_parts import DataSeen, MlflowLink, NettestSeen, ResumedFrom
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from trainer.wire.protocol import DataSummary

TEXT = """experiment_name: parts
max_retries: 2
mlflow: {tracking_uri: "sqlite:////tmp/elsewhere.db", experiment: exp-x}
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: /tmp/ckpts
  checkpoint: {resume: /tmp/ckpts/checkpoints/step-00000004}
"""
SENT = {"sink": "ntfy https://ntfy.sh", "ok": True, "attempts": 1, "error": "", "at": 5.0, "event": "failed"}
FAILED = {"sink": "webhook https://h", "ok": False, "attempts": 3, "error": "HTTP 500", "at": 6.0, "event": "failed"}
OPTIONS = {
    "continues": {"continues": {"run": "r-old", "name": "step-00000004", "step": 4, "auto": False}},
    "brought": {"resume_from": {"run": "r-old", "node": 1, "root": "/c", "name": "step-00000004"}},
    "named": {},
}
MLFLOW = {"run_id": "abc123", "experiment": "exp-x", "tracking_uri": "sqlite:////tmp/elsewhere.db",
          "ui_command": "mlflow ui --backend-store-uri sqlite:////tmp/elsewhere.db", "unsent": None}
DATA = {"examples": 1200, "eval_examples": 40, "format": "alpaca", "max_seq_len": 512, "truncated": 37,
        "truncated_tokens": 5120, "sources": [], "streamed": False,
        "text": "1200 examples + 40 held out (alpaca), 37 cut at max_seq_len 512 (5,120 tokens lost)",
        "mix": "", "mix_rows": []}
PATH = "/tmp/ckpts/checkpoints/step-00000004"
WHOLE = {"name": "step-00000002", "step": 2, "ok": True, "at": 7.0, "to": "node 0 (a)", "bytes": 3145728, "files": 4,
         "seconds": 1.25, "from_nodes": [1], "via": "direct"}
NOTE = {"note": "node 1 cannot dial node 0; copying through this machine", "at": 8.0}
NOT_WHOLE = {"name": "step-00000004", "step": 4, "ok": False, "at": 9.0, "to": "node 0 (a)", "error": "node 1 lost"}
ESTIMATE = {"wall_s": 600.0, "low_s": 500.0, "high_s": 700.0, "steps": 100, "startup_s": 30.0, "step_s": 5.5,
            "evals": 2, "eval_s": 10.0, "tail_s": 5.0, "source": "probe 20260301-0800", "source_run": "r-probe",
            "unit": "GPU", "hours": 1.5, "cost": 3.0, "currency": "USD", "correction": 1.1, "corrected_by": 2,
            "unmeasured": ["eval"], "fingerprint": "abc", "source_runs": ["r-probe"], "held": False}
KEPT = {"continues": {"estimate": ESTIMATE, "real": {"real_wall_s": 660.0, "steps_done": 100, "succeeded": True,
                                                     "error": 0.1, "ratio": 1.2}},
        "brought": {"estimate": ESTIMATE, "real": {"real_wall_s": 60.0, "steps_done": 4, "succeeded": False,
                                                   "compared": False, "why": "failed at step 4 of 100",
                                                   "error": None, "ratio": None}},
        "named": None}
RESUMED = {"continues": {"path": PATH, "step": 4, "run_id": "r-old", "auto": False},
           "brought": {"path": PATH, "step": 4, "run_id": "r-old"},
           "named": {"path": PATH, "step": 4, "run_id": None}}


def _run(home: Path, run_id: str, variant: str) -> None:
    plan = build_plan(validate_text(TEXT, "w.yaml").workload, run_id=run_id)
    store = RunStore(home)
    directory = store.create_run(plan, None, TEXT)
    save_plan(directory, plan)
    for state in (RunState.RUNNING, RunState.FAILED):
        store.set_state(run_id, state, 1)
    (directory / "mlflow.json").write_text(json.dumps({"run_id": "abc123", "synced": 3}))
    (directory / "notifications.jsonl").write_text(
        f"{json.dumps(SENT)}\nnot json\n{json.dumps({**FAILED, 'ok': 'no'})}\n{json.dumps(FAILED)}\n")
    data = DataSummary(1200, 40, "alpaca", 512, 37, 5120).record().to_json()
    (directory / "metrics.jsonl").write_text(f"{data}\n{json.dumps({'step': 1, 'kind': 'train', 'loss': 2.0})}\n")
    (directory / "gathers.jsonl").write_text(
        "".join(json.dumps(g) + "\n" for g in (WHOLE, NOTE, [1], {"name": 3, "ok": True}, NOT_WHOLE)) + "{torn\n")
    if KEPT[variant] is not None:
        (directory / "estimate.json").write_text(json.dumps(KEPT[variant], indent=1))
    (directory / "options.json").write_text(json.dumps({"force": False, "tags": {}, **OPTIONS[variant]}))


@pytest.mark.parametrize("variant", list(OPTIONS))
def test_the_reports_parts_are_types_and_its_json_is_as_it_was(tmp_path, variant):
    run_id = f"20260301-090000-parts-{variant}"
    _run(tmp_path, run_id, variant)
    report = run_report(tmp_path, run_id)
    assert isinstance(report.mlflow, MlflowLink) and isinstance(report.data, DataSeen)
    assert isinstance(report.resumed_from, ResumedFrom)
    assert [type(d) for d in report.notifications] == [Delivery, Delivery]  # the torn lines are left out
    assert [type(g) for g in report.gathers] == [Gather, GatherNote, Gather]
    data = report.to_dict()
    assert data["mlflow"] == MLFLOW and data["data"] == DATA and data["notifications"] == [SENT, FAILED]
    assert data["resumed_from"] == RESUMED[variant] and list(data["resumed_from"]) == list(RESUMED[variant])
    assert data["gathers"] == [WHOLE, NOTE, NOT_WHOLE] and [list(g) for g in data["gathers"]] == [
        list(WHOLE), list(NOTE), list(NOT_WHOLE)]  # the lines as written, key for key
    assert data["estimate"] == KEPT[variant] and (report.estimate is None) == (KEPT[variant] is None)
    if KEPT[variant] is not None and "real" in KEPT[variant]:  # key for key, with or without compared/why
        assert list(data["estimate"]["real"]) == list(KEPT[variant]["real"])
    assert data["nettest"] is None and data["max_attempts"] == 3
    json.dumps(data)  # what --json prints


def test_a_nettest_seen_is_written_as_it_was():
    seen = NettestSeen("nt-1", 5.0, "fine: every pair within 10% of the best", 2.5e9, "2.5 GB/s all-gather")
    assert seen.to_dict() == {"run_id": "nt-1", "started_at": 5.0, "verdict": "fine: every pair within 10% of the best",
                              "all_gather_busbw": 2.5e9, "summary": "2.5 GB/s all-gather"}


def test_no_part_of_the_report_is_untyped_json():
    import typing

    hints = typing.get_type_hints(RunReport)
    untyped = [name for name, hint in hints.items() if "Mapping" in str(hint) or "dict" in str(hint).lower()]
    assert untyped == []


def test_the_gatherer_writes_its_lines_through_the_one_type(tmp_path):
    """What the owner's gatherer appends reads back as the same type and JSON (one writer, one reader)."""
    from launcher.runs.core.gathers import append_gather, read_gathers

    entries = [Gather("step-00000002", 2, True, 7.0, "node 0 (a)", 3145728, 4, 1.25, (1,), "direct"),
               GatherNote(NOTE["note"], 8.0), Gather("step-00000004", 4, False, 9.0, "node 0 (a)", error="lost")]
    for entry in entries:
        append_gather(tmp_path / "gathers.jsonl", entry)
    assert read_gathers(tmp_path) == entries
    assert [json.loads(x) for x in (tmp_path / "gathers.jsonl").read_text().splitlines()] == [WHOLE, NOTE, {
        **NOT_WHOLE, "error": "lost"}]
