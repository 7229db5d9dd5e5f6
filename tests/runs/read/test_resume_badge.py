"""A resume's check, as the launcher keeps and shows it: the owner's recorder keeps the newest
``resume_check`` record beside the metrics, ``show`` prints a ``resume`` line, ``runs`` a badge column
(and what differs as the WHY), the monitor's view a badge and a why-line (MLflow's two tags:
``test_mlflow_sink.py``)."""

from __future__ import annotations

import json

from launcher.events import MetricsRecorded, RunState, RunStateChanged
from launcher.runs.core.layout import RESUME_CHECK, RecordedPlan, read_resume_check, save_plan
from launcher.runs.core.resume_badge import ResumeBasis
from launcher.runs.core.store import RunStore
from launcher.runs.owner.recorder import Recorder
from launcher.runs.read.view import RunView
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from trainer.wire.protocol import MetricRecord, ResumeCheck

DIFFERS = ResumeCheck(verdict="differs", step=6, from_step=6, from_run="run-old", world_before=2, world_after=2,
                      sharding_before="full_shard", sharding_after="full_shard",
                      differs=("seed: 42 in the checkpoint, 7 now", "next batch: not the rows the stopped run would "
                               "have trained on next (another data order)"),
                      checked=("step", "learning rate"))
VERIFIED = ResumeCheck(verdict="verified", step=9, from_step=9, world_before=2, world_after=2, checked=("step",))


RESUMED = """experiment_name: res
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: /tmp/ckpts/$FSDP_TUI_RUN_ID
  checkpoint: {resume: /tmp/ckpts/run-old/checkpoints/step-00000006}
"""
"""A resume as ``fsdp-tui resume`` makes one: the built-in trainer, a checkpoint named."""


def _recorded_run(home, run_id: str, text: str = RESUMED) -> Recorder:
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id=run_id)
    store = RunStore(home)
    save_plan(store.create_run(plan, None, text), plan)  # as the launch writes it, before the owner starts
    rec = Recorder(store, run_id, {0: "this machine"}, parse_logs=None)
    rec.set_state(RunState.RUNNING)
    return rec


def _cli(capsys, *args: str) -> str:
    """A short read-only command in this process; its output."""
    from launcher.cli.main import main

    assert main(list(args)) == 0
    out = capsys.readouterr()
    return out.out + out.err


def test_the_newest_check_is_kept_and_shown_by_show_runs_and_the_monitor(home, monkeypatch, capsys):
    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    rec = _recorded_run(home, "20260301-090000-res-aaaa")
    train = MetricRecord(step=7, max_steps=10, loss=2.5, time=1.0)
    hostile = DIFFERS.record().to_json().replace("seed: 42", "seed:\\u001b[31m 42")  # a node's escape codes
    # Split mid-line, as a node's file arrives: the record counts once whole.
    data = (train.to_json() + "\n" + hostile + "\n").encode()
    rec.append_metrics(data[:30])
    assert read_resume_check(rec.dir) is None
    rec.append_metrics(data[30:])
    kept = read_resume_check(rec.dir)
    assert kept.verdict == "differs" and kept.differs[0] == "seed:?[31m 42 in the checkpoint, 7 now"
    rec.set_state(RunState.SUCCEEDED)

    other = _recorded_run(home, "20260301-090001-res-bbbb")  # an earlier check replaced by a newer attempt's
    other.append_metrics((DIFFERS.record().to_json() + "\n" + VERIFIED.record().to_json() + "\n").encode())
    assert read_resume_check(other.dir) == VERIFIED
    other.set_state(RunState.SUCCEEDED)
    _recorded_run(home, "20260301-090002-res-cccc").set_state(RunState.SUCCEEDED)  # never resumed

    shown = _cli(capsys, "show", "20260301-090000-res-aaaa")
    assert ("  resume    differs at step 6 (from step 6 of run run-old): seed:?[31m 42 in the checkpoint, 7 now; "
            "next batch: not the rows") in shown, shown
    assert "\x1b" not in shown
    assert "  resume    verified at step 9 (from step 9): checked step\n" in \
           _cli(capsys, "show", "20260301-090001-res-bbbb")
    assert "  resume " not in _cli(capsys, "show", "20260301-090002-res-cccc")

    lines = {line.split()[0]: line for line in _cli(capsys, "runs").splitlines()}
    assert "RESUME" in lines["RUN"]
    assert " differs    resume differs: seed:?[31m 42 in the" in lines["20260301-090000-res-aaaa"]
    assert lines["20260301-090001-res-bbbb"].rstrip().endswith(" verified")
    assert lines["20260301-090002-res-cccc"].rstrip().endswith(" -")
    as_json = {r["run_id"]: r["resume_check"] for r in json.loads(_cli(capsys, "runs", "--json"))}
    assert as_json["20260301-090001-res-bbbb"]["verdict"] == "verified"
    assert as_json["20260301-090002-res-cccc"] is None

    # The monitor's view: a badge for the summary line, and what differs where a failure's why would be.
    view = RunView("20260301-090000-res-aaaa")
    assert view.resume_badge() == "" and view.why() == ""
    view.apply(MetricsRecorded(view.run_id, MetricRecord.from_json(hostile)), now=2.0)
    assert view.resume_badge() == "resume DIFFERS"
    assert view.why().startswith("resume differs: seed:?[31m 42 in the checkpoint, 7 now; next batch")
    view.apply(MetricsRecorded(view.run_id, VERIFIED.record()), now=3.0)  # a later attempt's resume
    assert view.resume_badge() == "resume VERIFIED" and view.why() == ""
    (rec.dir / RESUME_CHECK).write_text("{not json")  # a torn or foreign file is no check, never a crash
    assert read_resume_check(rec.dir) is None


def test_a_check_from_a_run_that_did_not_resume_is_ignored_and_said(home, monkeypatch, capsys):
    """A plain job that writes a ``resume_check`` record, and a fresh trainer run whose output_dir is its
    own: the launcher knows neither resumed, so their checks are no badge; each says it ignored one."""
    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    plain = _recorded_run(home, "20260301-090003-res-dddd", "experiment_name: res\ncommand: echo\n")
    fresh = _recorded_run(home, "20260301-090004-res-eeee", RESUMED.replace(
        "  checkpoint: {resume: /tmp/ckpts/run-old/checkpoints/step-00000006}\n", ""))
    for rec in (plain, fresh):
        rec.append_metrics((VERIFIED.record().to_json() + "\n").encode())
        rec.set_state(RunState.SUCCEEDED)
    shown = _cli(capsys, "show", "20260301-090003-res-dddd")
    assert ("  resume    a resume check (verified) from its job was ignored: the run did not resume (it runs a "
            "command of its own; only the built-in trainer resumes)\n") in shown, shown
    assert "verified at step" not in shown
    assert "it was its first attempt: there was nothing to resume from" in _cli(capsys, "show", "20260301-090004-res-eeee")
    lines = {line.split()[0]: line for line in _cli(capsys, "runs").splitlines()}
    for run_id in ("20260301-090003-res-dddd", "20260301-090004-res-eeee"):
        assert " -          a resume check (verified) from its job " in lines[run_id], lines[run_id]
    listed = {r["run_id"]: r for r in json.loads(_cli(capsys, "runs", "--json"))}
    assert listed["20260301-090003-res-dddd"]["resume_check"] is None
    assert listed["20260301-090003-res-dddd"]["resume_ignored"].startswith("a resume check (verified)")
    report = json.loads(_cli(capsys, "show", "20260301-090003-res-dddd", "--json"))
    assert report["resume_check"] is None and "ignored" in report["resume_ignored"]


def test_mlflow_gets_the_badge_only_from_a_run_that_resumed(home):
    from launcher.runs.core.layout import load_plan
    from launcher.runs.owner.tracking import Tracker

    train = MetricRecord(step=9, loss=1.0)
    for run_id, text, kept in (("20260301-090005-res-ffff", "experiment_name: res\ncommand: echo\n", [train]),
                               ("20260301-090006-res-abab", RESUMED, [train, VERIFIED.record()])):
        rec = _recorded_run(home, run_id, text)
        tracker = Tracker(home, load_plan(rec.dir), rec.dir)
        assert tracker._trusted([train, VERIFIED.record()]) == kept


def test_the_monitor_shows_no_badge_from_a_run_that_did_not_resume():
    plain = {"experiment_name": "res", "command": "echo", "parameters": {}}
    view = RunView("20260301-090007-res-cdcd")
    view.resume_basis = ResumeBasis.of_plan(RecordedPlan.from_wire({"workload": plain}))
    view.apply(MetricsRecorded(view.run_id, VERIFIED.record()), now=1.0)
    assert view.resume_badge() == ""
    trainer = {"experiment_name": "res", "parameters": {"output_dir": "/ckpts/$FSDP_TUI_RUN_ID"}}
    view.resume_basis = ResumeBasis.of_plan(RecordedPlan.from_wire({"workload": trainer}))  # its first attempt in a folder of its own: nothing to resume from
    view.apply(MetricsRecorded(view.run_id, VERIFIED.record()), now=2.0)
    assert view.resume_badge() == ""
    view.apply(RunStateChanged(view.run_id, RunState.RUNNING, 2), now=3.0)  # a retry resumes
    view.apply(MetricsRecorded(view.run_id, VERIFIED.record()), now=4.0)
    assert view.resume_badge() == "resume VERIFIED"
