"""The node agent's export never writes twice what the trainer exported of a step itself: a full model's
folder, a LoRA adapter's, and a LoRA run's merged model (``<step>-merged``); asked for the merged model of
a step whose adapter the trainer exported, it writes the merged model only. The trainer's export process is
stood in for by a recorder of its command line (its own tests run it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launcher.backends.agent import checkpoints

NAME = "step-00000040"


def _checkpoint(out: Path, lora: bool) -> None:
    folder = out / "checkpoints" / NAME
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(b"m")
    (folder / "meta.json").write_text(json.dumps({"step": 40, "run_id": "r", **({"lora": {"r": 8}} if lora else {})}))


def _exported(folder: Path, lora: bool) -> None:
    folder.mkdir(parents=True)
    names = ("adapter_config.json", "adapter_model.safetensors") if lora else ("config.json", "model.safetensors")
    for name in names:
        (folder / name).write_text("x")


@pytest.fixture
def asked(monkeypatch):
    """Each ``python -m trainer.export`` command line, which writes what it was asked for."""
    lines: list[list[str]] = []

    def run(argv, **_kwargs):
        lines.append(argv)
        out = Path(argv[4])
        only = "--merged-only" in argv
        _exported(out, lora="--merged" in argv and not only)
        if "--merged" in argv:
            _exported(Path(str(out) + "-merged"), lora=False)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(checkpoints.subprocess, "run", run)
    return lines


def _export(tmp_path: Path, merged: bool) -> dict:
    return checkpoints.export(str(tmp_path / "out"), {}, str(tmp_path), NAME, "python3", "", 60.0, merged=merged)


@pytest.mark.parametrize("lora", [False, True])
def test_the_trainers_own_export_of_a_step_is_the_answer(tmp_path, asked, lora):
    _checkpoint(tmp_path / "out", lora)
    _exported(tmp_path / "out" / "hf" / NAME, lora)
    got = _export(tmp_path, merged=False)
    assert got["reused"] and got["path"] == str(tmp_path / "out" / "hf" / NAME) and asked == []


def test_a_lora_steps_merged_export_writes_only_what_the_trainer_did_not(tmp_path, asked):
    _checkpoint(tmp_path / "out", lora=True)
    hf = tmp_path / "out" / "hf"
    _exported(hf / NAME, lora=True)
    got = _export(tmp_path, merged=True)  # the adapter is the trainer's: the merged model alone is written
    assert got["reused"] and got["path"] == str(hf / NAME) and got["merged"] == str(hf / f"export-{NAME}-merged")
    assert [a[3:] for a in asked] == [[str(tmp_path / "out" / "checkpoints" / NAME), got["merged"], "--merged-only"]]
    assert sorted(p.name for p in hf.iterdir()) == [f"export-{NAME}-merged", NAME]  # no second adapter
    _exported(hf / f"{NAME}-merged", lora=False)  # the trainer wrote its merged model too (export_merged)
    again = _export(tmp_path, merged=True)
    assert again == {"path": str(hf / NAME), "files": ["adapter_config.json", "adapter_model.safetensors"],
                     "reused": True, "merged": str(hf / f"{NAME}-merged")} and len(asked) == 1


def test_without_the_trainers_export_both_are_written_once(tmp_path, asked):
    _checkpoint(tmp_path / "out", lora=True)
    got = _export(tmp_path, merged=True)
    hf = tmp_path / "out" / "hf"
    assert got["path"] == str(hf / f"export-{NAME}") and got["merged"] == str(hf / f"export-{NAME}-merged")
    assert asked[0][-1] == "--merged" and "reused" not in got
