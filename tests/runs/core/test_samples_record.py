"""A run's samples as its readers get them: ``show --samples`` and ``sweep show --samples`` from the real console
script on recorded runs (the pure views: tests/present/test_samples.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))


def _line(step: int, *answers: str) -> str:
    prompts = ("Add 2 + 3.", "Reverse: abc")
    return json.dumps({"step": step, "samples": [{"prompt": p, "answer": a, **({"reference": "cba"} if i else {})}
                                                 for i, (p, a) in enumerate(zip(prompts, answers, strict=True))]}) + "\n"


def test_show_samples_and_sweep_show_samples(tmp_path):
    from launcher.events import RunState
    from launcher.runs.sweeps.record import SweepRecord, VariantRecord, save_sweep
    from tests.support.tui import RecordedRun, record

    lines = {"run-a": _line(0, "x", "y") + _line(10, "5", "cba"), "run-b": _line(0, "x", "y") + _line(10, "6", "cba")}
    for i, (rid, text) in enumerate(lines.items()):
        directory = record(tmp_path, RecordedRun(rid, "lora", RunState.SUCCEEDED, 1, i, 30, 1.0, None, 10, 10))
        (directory / "samples.jsonl").write_text(text + '{"step": 20, "samp')  # a torn line is not read
    record(tmp_path, RecordedRun("run-none", "lora", RunState.SUCCEEDED, 1, 9, 30))
    env = {**os.environ, "FSDP_TUI_HOME": str(tmp_path)}

    def cli(*args: str) -> str:
        done = subprocess.run([FSDP_TUI, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    shown = cli("show", "run-a", "--samples").splitlines()
    assert shown == ["run run-a: answers at steps 0, 10", "prompt 1: Add 2 + 3.", "      step 0  x", "     step 10  5",
                     "prompt 2: Reverse: abc", "        data  cba", "      step 0  y", "     step 10  cba"]
    assert json.loads(cli("show", "run-a", "--samples", "--json"))["samples"][1]["step"] == 10
    assert "no samples" in cli("show", "run-none", "--samples")
    variants = [VariantRecord(i, f"lora.r={r}", {"parameters.lora.r": r}, [f"parameters.lora.r={r}"], rid, "succeeded")
                for i, (r, rid) in enumerate(((4, "run-a"), (8, "run-b")), 1)]
    save_sweep(tmp_path, SweepRecord("sweep-lora-1", "lora", "w.yaml", [], 1, "continue", variants, state="succeeded"))
    side = cli("sweep", "show", "sweep-lora-1", "--samples").splitlines()
    assert side[0].startswith("sweep sweep-lora-1: the answers of variants 1 and 2, each at its newest step")
    assert side[1].startswith("1: lora.r=4 (step 10)") and "2: lora.r=8 (step 10)" in side[1]
    assert side[2] == "prompt 1: Add 2 + 3." and side[3].split() == ["5", "|", "6"]
    assert side[6].split() == ["cba", "=", "cba"]
    early = cli("sweep", "show", "sweep-lora-1", "--samples", "2,1", "--step", "3").splitlines()
    assert "at step 3" in early[0] and early[3].split() == ["x", "=", "x"]
