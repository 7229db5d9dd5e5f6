"""``clean`` and ``rm`` of a run whose ``output_dir`` is outside its folders, on this machine (the real agent):
its own checkpoints are removed where they are held, never another run's; the folder is said as the node
sees it (``$FSDP_TUI_RUN_ID`` expanded); ``rm`` says where the files stay, with a command for each, before
the record goes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from launcher.events import RunState
from launcher.runs.core.layout import save_plan
from launcher.runs.core.store import RunStore
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text

WORKLOAD = ("experiment_name: two\nparameters:\n  model_name: builtin:tiny-llama\n  dataset_name: builtin:tiny-alpaca\n"
            "  output_dir: '{out}'\n  checkpoint: {{resume_runs: {lin}}}\n")


def _run(home: Path, out: str, run_id: str, lineage: list[str] = ()) -> None:
    plan = build_plan(validate_text(WORKLOAD.format(out=out, lin=json.dumps(list(lineage))), "w.yaml").workload,
                      run_id=run_id, node_root=str(home / "nodes"))
    store = RunStore(home)
    directory = store.create_run(plan, None, "x: 1\n")
    save_plan(directory, plan)
    store.set_state(run_id, RunState.SUCCEEDED, 1)


def _save(root: Path, step: int, run_id: str) -> None:
    folder = root / "checkpoints" / f"step-{step:08d}"
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(b"m")
    (folder / "meta.json").write_text(json.dumps({"step": step, "run_id": run_id}))


def test_clean_removes_the_runs_own_checkpoints_and_never_another_runs(home, tmp_path):
    from launcher.api import Client

    out = tmp_path / "srv" / "two"
    _run(home, str(out), "run-a")
    _run(home, str(out), "run-b", ["run-a"])
    for step, run_id in ((50, "run-a"), (100, "run-a"), (200, "run-b")):
        _save(out, step, run_id)
    report = asyncio.run(Client(home).run_files.clean("run-a"))
    said = report.lines()
    assert f"removed its 2 checkpoints from {out} on this machine" in said
    assert f"its output_dir stays: {out} on this machine (outside the run's folder: its exports, if any; " \
           "1 checkpoint of other runs stay there)" in said
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000200"]


def test_a_folder_per_run_is_said_expanded_and_emptied_of_the_runs_checkpoints(home, tmp_path):
    from launcher.api import Client

    _run(home, str(tmp_path / "per-run" / "$FSDP_TUI_RUN_ID"), "run-c")
    folder = tmp_path / "per-run" / "run-c"
    _save(folder, 10, "run-c")
    _save(folder, 20, "run-c")
    said = asyncio.run(Client(home).run_files.clean("run-c")).lines()
    assert f"removed its 2 checkpoints from {folder} on this machine" in said and "$FSDP_TUI_RUN_ID" not in "".join(said)
    assert list((folder / "checkpoints").iterdir()) == []


def test_rm_says_where_the_files_stay_before_the_record_goes(home, tmp_path, monkeypatch, capsys):
    from launcher.cli.main import main
    from tests.tui.support import RecordedRun, record

    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    run_id = "20260301-0900-kept-a1f3"
    record(home, RecordedRun(run_id, "x", RunState.SUCCEEDED, 1, 0, 60))
    seen: list[bool] = []
    from launcher.api import run_files

    real = run_files.RunFiles.left_behind

    def left_behind(self, rid):  # what rm says is asked while the record is still there
        seen.append(RunStore(home).get_run(rid) is not None)
        return real(self, rid)

    monkeypatch.setattr(run_files.RunFiles, "left_behind", left_behind)
    assert main(["rm", run_id]) == 0
    err = capsys.readouterr().err
    assert seen == [True]
    line = next(x for x in err.splitlines() if "node 0 (gpu-a)" in x)
    assert line.endswith(f"stay there: ~/.fsdp-tui/runs/{run_id}/node-0; remove them: ssh gpu-a rm -r -- "
                         f"~/.fsdp-tui/runs/{run_id}"), line  # recorded without a plan: the node's home kept
    assert "before rm" not in err  # no advice that needs the record it is about to forget


def test_a_sweep_variant_whose_run_was_removed_says_so(home):
    from launcher.runs.read.comparison import sweep_stats
    from launcher.runs.sweeps.record import SweepRecord, VariantRecord

    variants = [VariantRecord(1, "lr=1", {}, [], "run-gone", "succeeded"),
                VariantRecord(2, "lr=2", {}, [], "run-later", "skipped", "skipped: the sweep stopped")]
    rows = sweep_stats(home, SweepRecord("s", "e", "f.yaml", [], 1, "continue", variants))
    assert rows[0].signature == "its run's record was removed (fsdp-tui rm run-gone): no figures are left"
    assert rows[1].signature == "skipped: the sweep stopped"
