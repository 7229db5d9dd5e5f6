"""Three runs of one workload share a fixed ``output_dir`` on this machine (listed by the real agent): run A
saved 50 and 100, run B resumed A and saved 200 to 300, a probe saved nothing. Each run's ``ckpt`` lists its
own (and, marked, the ones it continued); ``export`` and ``resume`` of a run with none of its own exit as
documented, naming what the folder holds and whose; nothing deletes another run's checkpoint."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from launcher.events import RunState
from launcher.runs.core.layout import save_plan
from launcher.runs.core.store import RunStore
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text

WORKLOAD = ("experiment_name: two\ncommand: x\nparameters:\n  output_dir: '{out}'\n  max_steps: 300\n"
            "  checkpoint: {{resume_runs: {lineage}}}\n")


def _run(home: Path, out: Path, run_id: str, lineage: list[str], steps: list[int]) -> None:
    plan = build_plan(validate_text(WORKLOAD.format(out=out, lineage=json.dumps(lineage)), "w.yaml").workload,
                      run_id=run_id, node_root=str(home / "nodes"))
    store = RunStore(home)
    directory = store.create_run(plan, None, "x: 1\n")
    save_plan(directory, plan)
    store.set_state(run_id, RunState.SUCCEEDED, 1)
    for step in steps:
        folder = out / "checkpoints" / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(b"x" * 100)
        (folder / ".metadata").write_bytes(b"m")
        (folder / "meta.json").write_text(json.dumps({"step": step, "run_id": run_id}))


@pytest.fixture
def folder(home, tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    out = tmp_path / "srv" / "ckpt" / "two"
    _run(home, out, "run-a", [], [50, 100])
    _run(home, out, "run-b", ["run-a"], [200, 250, 300])
    _run(home, out, "run-probe", [], [])
    return out


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from launcher.cli.main import main

    code = main(list(args))
    got = capsys.readouterr()
    return code, got.out, got.err


def _steps(listed: str) -> list[str]:
    return [line.split()[0] for line in listed.splitlines()[2:] if line.split() and line.split()[0].isdigit()]


def test_each_run_lists_its_own_and_marks_what_it_continued(folder, capsys):
    code, out, err = _cli(capsys, "ckpt", "run-a")
    assert code == 0 and _steps(out) == ["50", "100"], out
    assert "the folder also holds 3 checkpoints of other runs: fsdp-tui ckpt run-a --all" in err
    code, out, _ = _cli(capsys, "ckpt", "run-a", "--all")
    assert _steps(out) == ["50", "100", "200", "250", "300"] and "step-00000300  (run run-b's)" in out
    code, out, err = _cli(capsys, "ckpt", "run-b")
    assert _steps(out) == ["50", "100", "200", "250", "300"] and err == ""
    assert "step-00000100  (run run-a's (continued))" in out and "step-00000300\n" in out
    code, out, _ = _cli(capsys, "ckpt", "run-b", "--json")
    assert [(c["step"], c["whose"], c["run_id"]) for c in json.loads(out)][1:3] == [(100, "continued", "run-a"),
                                                                                (200, "own", "run-b")]
    code, out, err = _cli(capsys, "ckpt", "run-probe")
    assert code == 0 and "no checkpoints of run run-probe in node 0 (this machine)" in out
    assert "holds 5 checkpoints of other runs" in err


def test_export_and_resume_of_a_run_without_a_checkpoint_of_its_own_say_whose_the_folder_holds(folder, capsys):
    held = "(the folder holds run run-a's steps 50, 100; run run-b's steps 200, 250, 300)"
    code, _, err = _cli(capsys, "export", "run-probe")
    assert code == 1 and "run run-probe has no complete checkpoint of its own" in err and held in err, err
    code, _, err = _cli(capsys, "resume", "run-probe")
    assert code == 2 and "run run-probe has no complete checkpoint of its own" in err and held in err, err
    code, _, err = _cli(capsys, "export", "run-b", "--step", "100")
    assert code == 1 and "no complete checkpoint of its own at step 100" in err and "its own complete ones: " \
        "200, 250, 300" in err


def test_a_run_deletes_only_its_own(folder, home):
    from launcher.api import Client
    from launcher.api.checkpoints import CheckpointError

    client = Client(home)
    with pytest.raises(CheckpointError, match="step-00000100 is run run-a's: only its own run deletes it"):
        asyncio.run(client.checkpoints.delete("run-b", "step-00000100"))
    with pytest.raises(CheckpointError, match="newest complete checkpoint"):
        asyncio.run(client.checkpoints.delete("run-b", "step-00000300"))
    asyncio.run(client.checkpoints.delete("run-b", "step-00000200"))
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == [
        "step-00000050", "step-00000100", "step-00000250", "step-00000300"]
    safe = client.runs.last_safe_step("run-a")
    assert safe is not None and safe.found is not None and safe.found.step == 100  # its own, never B's 300
    assert client.runs.last_safe_step("run-probe").text() == "no complete checkpoint of its own yet"


def test_verify_reads_the_bytes_back_and_a_shard_that_differs_makes_its_checkpoint_not_whole(folder, capsys):
    import hashlib

    step = folder / "checkpoints" / "step-00000100"
    meta = json.loads((step / "meta.json").read_text())
    meta["shards"] = {"__0_0.distcp": {"bytes": 100, "node": 1, "sha256": hashlib.sha256(b"x" * 100).hexdigest()}}
    (step / "meta.json").write_text(json.dumps(meta))
    code, _, err = _cli(capsys, "ckpt", "run-a", "--verify")
    assert code == 0 and "step-00000100: its bytes are the ones the trainer wrote" in err, err
    (step / "__0_0.distcp").write_bytes(b"x" * 96 + b"yyyy")  # its size kept
    code, out, err = _cli(capsys, "ckpt", "run-a", "--verify")
    assert code == 1 and "step-00000100: NOT whole now: __0_0.distcp (written on node 1): its bytes differ" in err
    assert "step-00000100: not whole: the bytes of __0_0.distcp (written on node 1) differ from what the trainer " \
           "wrote" in out
    code, out, _ = _cli(capsys, "ckpt", "run-a", "--json")
    assert [(c["step"], c["complete"]) for c in json.loads(out)] == [(50, True), (100, False)]  # 50: the safe step
