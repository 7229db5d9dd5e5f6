"""A probe of ``doctor --estimate``, an interconnect test and a resume that trained nothing are said to be
what they are, in ``runs`` (its why column and ``--json``) and in the app's run table, not read as training
runs that stopped early. Records written as a launch and its owner write them (store, plan, options with what a
resume continues, metrics, the owner's recorded end)."""

from __future__ import annotations

import json

import pytest

from launcher.events import RunState
from launcher.runs.core.continuing import OPTION, Continuation, trained_nothing
from launcher.runs.core.estimates import PROBE_TAG
from launcher.runs.core.layout import METRICS, OPTIONS
from launcher.runs.core.run_kind import NETTEST_TAG, RunKind, run_kind
from launcher.runs.core.store import RunStore
from launcher.runs.launch import create_run
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from trainer.wire.protocol import MetricRecord

TRAINER = ("experiment_name: {name}\ncompute: {{accelerator_type: CPU, procs_per_node: 2}}\n"
           "parameters: {{model_name: builtin:tiny-llama, dataset_name: builtin:tiny-alpaca, output_dir: outputs, "
           "max_steps: 300{extra}}}\n")
SCRIPT = "experiment_name: {name}\ncompute: {{accelerator_type: CPU, procs_per_node: 2}}\ncommand: python x.py{extra}\n"
RESUME = ", checkpoint: {resume: /ckpt/step-00000300, resume_runs: [run-first]}"


def _record(home, run_id: str, text: str, state: RunState, *, tags: dict | None = None,
            steps: tuple[int, ...] = (), checks: tuple[int, ...] = ()) -> None:
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id=run_id, node_root=str(home / "nodes"))
    directory = create_run(plan, home)
    options: dict = {"force": False, "tags": tags or {}}
    if "resume_runs" in text:
        options[OPTION] = Continuation("run-first", "step-00000300", 300).to_option()
    (directory / OPTIONS).write_text(json.dumps(options))
    records = [MetricRecord(step=s, kind="train", loss=1.0, max_steps=300) for s in steps]
    records += [MetricRecord(step=s, kind="resume_check", max_steps=300) for s in checks]
    (directory / METRICS).write_text("".join(r.to_json() + "\n" for r in records))
    store = RunStore(home)
    store.set_state(run_id, RunState.RUNNING, 1)
    if state != RunState.RUNNING:
        # the owner records a run that ended without a step of its own as such
        nothing = state == RunState.SUCCEEDED and not steps and "resume_runs" in text
        store.set_state(run_id, state, 1, detail=trained_nothing(directory, 300) if nothing else "")
    store.record_metric_summary(run_id, last_loss=None, best_eval_loss=None,
                                step=max(steps + checks) if steps + checks else None, max_steps=300)


RUNS = [
    # run id, workload, state, tags, own train steps, what it is
    ("run-first", TRAINER.format(name="two-nodes", extra=""), RunState.SUCCEEDED, None, (1, 2, 300), RunKind("run-first")),
    ("run-probe", TRAINER.format(name="two-nodes", extra=""), RunState.CANCELLED, {PROBE_TAG: "1"}, (1, 22),
     RunKind("run-probe", "probe")),
    ("run-net", SCRIPT.format(name="nettest-two-nodes", extra=""), RunState.SUCCEEDED, {NETTEST_TAG: "1"}, (),
     RunKind("run-net", "nettest")),
    ("run-resume-none", TRAINER.format(name="two-nodes", extra=RESUME), RunState.SUCCEEDED, None, (),
     RunKind("run-resume-none", trained_nothing=True, continued="run-first")),
    ("run-resume-some", TRAINER.format(name="two-nodes", extra=RESUME), RunState.CANCELLED, None, (301, 302),
     RunKind("run-resume-some", continued="run-first")),
    ("run-resume-live", TRAINER.format(name="two-nodes", extra=RESUME), RunState.RUNNING, None, (),
     RunKind("run-resume-live", continued="run-first")),
    ("run-script", SCRIPT.format(name="mine", extra=""), RunState.SUCCEEDED, None, (), RunKind("run-script")),
]


@pytest.fixture
def world(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    for run_id, text, state, tags, steps, _ in RUNS:
        _record(home, run_id, text, state, tags=tags, steps=steps, checks=(300,) if "resume" in run_id else ())
    from launcher.runs.core.ownership import OwnerLock

    held = OwnerLock(home / "runs" / "run-resume-live")  # a live run's owner is elsewhere: nobody adopts it
    assert held.acquire()
    yield home
    held.release()


def test_each_runs_kind_from_its_record(world):
    store = RunStore(world)
    for run_id, *_, kind in RUNS:
        assert run_kind(world, store.get_run(run_id).summary) == kind, run_id
    # a test kept before its runs were tagged is known by its kept record
    _record(world, "run-old-net", SCRIPT.format(name="nettest-x", extra=""), RunState.SUCCEEDED)
    (world / "nettests").mkdir()
    (world / "nettests" / "run-old-net.json").write_text("{}")
    assert run_kind(world, store.get_run("run-old-net").summary).kind == "nettest"


def test_runs_says_what_each_run_was(world, capsys):
    from launcher.cli.main import main

    assert main(["runs"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "probe of doctor --estimate" in rows["run-probe"]
    assert "interconnect test (fsdp-tui nettest)" in rows["run-net"] and " 300" not in rows["run-net"]
    assert rows["run-resume-none"].count("trained nothing") == 1
    assert "trained nothing: it continued run" in rows["run-resume-none"]
    for plain in ("run-first", "run-resume-some", "run-resume-live", "run-script"):
        assert "probe" not in rows[plain] and "trained nothing" not in rows[plain] and "nettest" not in rows[plain]
    assert main(["runs", "--json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["run-probe"]["kind"] == "probe" and listed["run-net"]["kind"] == "nettest"
    assert listed["run-resume-none"]["trained_nothing"] and listed["run-resume-none"]["continued"] == "run-first"
    assert listed["run-first"]["kind"] == "training" and not listed["run-first"]["trained_nothing"]


async def test_the_apps_run_table_marks_them(world):
    from tests.tui.support import wait_for
    from tui.app import FsdpTuiApp
    from tui.widgets.runs_table import RunsTable

    app = FsdpTuiApp(world)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.screen.query_one(RunsTable)
        await wait_for(pilot, lambda: table.row_count == len(RUNS) and bool(table.kinds))

        def state(run_id: str) -> str:
            return str(table.get_cell(run_id, "state"))

        assert state("run-probe") == "cancelled · probe"
        assert state("run-net") == "succeeded · nettest"
        assert state("run-resume-none") == "succeeded · trained nothing"
        assert state("run-first") == "succeeded" and state("run-resume-some") == "cancelled"
        table.set_filter("probe")
        assert table.shown_ids == ["run-probe"]
