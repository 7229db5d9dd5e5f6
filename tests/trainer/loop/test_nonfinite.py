"""A loss that turns NaN through the real trainer on 2 ranks (torchrun, gloo), with each ``training.on_nan``:
``stop`` (the default) ends every rank at the step it is read, with one line naming the step and the rank,
no checkpoint after it; ``skip_step`` skips that step's update and trains on; ``continue`` says it once.
The NaN is put on one rank by ``nan_worker.py`` (the test's fault, not the trainer's)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from launcher.runs.core.triage import triage_run
from tests.support.trainer.run import HERE, ROOT, tiny_params, torchrun_argv, trainer_env
from trainer.wire.ckpt_layout import list_checkpoints

pytestmark = pytest.mark.slow
ENDED = re.compile(r"(?:STOPPED|TRAINED) (\d+) (\d+)(?: ([^\n]*))?\n")
"""``nan_worker.py``'s line at each file's end: the file's index, the rank, and a stop's message."""

QUIET = {"logging": {"eval_every_steps": None, "eval_max_batches": 1},
         "checkpoint": {"export_hf": False, "keep_last": 10}}
CASES = {
    # name: (parameters over the tiny ones, the rank and steps made NaN)
    "stop": ({"max_steps": 8, "checkpoint": {"every_steps": 2}}, 1, [5]),
    "stop_late": ({"max_steps": 8, "logging": {"every_steps": 4}, "checkpoint": {"every_steps": 3}}, 1, [5]),
    "skip": ({"max_steps": 6, "training": {"on_nan": "skip_step"}, "checkpoint": {"every_steps": 3}}, 1, [3]),
    "continue": ({"max_steps": 4, "training": {"on_nan": "continue"}}, 0, [2]),
    "last": ({"max_steps": 5, "checkpoint": {"every_steps": 2}, "gradient_accumulation_steps": 2}, 0, [3]),
}


def _params(tmp_path, name: str) -> tuple:
    over, rank, steps = CASES[name]
    params = tiny_params(tmp_path / name / "out", **QUIET)
    for key, value in over.items():
        params[key] = {**params.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / name / "params.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(params))
    path.with_suffix(".nan.json").write_text(json.dumps({"rank": rank, "steps": steps}))
    return path, tmp_path / name / "out"


def _steps(out) -> list[int]:
    return [c.step for c in list_checkpoints(str(out / "checkpoints")) if c.complete]


def test_a_nan_loss_stops_skips_or_goes_on_as_training_on_nan_says(tmp_path):
    paths = {name: _params(tmp_path, name) for name in CASES}
    argv = torchrun_argv(2, str(HERE / "nan_worker.py"), *(str(p) for p, _ in paths.values()))
    out = subprocess.run(argv, cwd=ROOT, env=trainer_env(tmp_path), capture_output=True, text=True, timeout=600)
    said = out.stdout + out.stderr
    # Each of these is one write, but a rank's print() of its own lines is two (text, then newline): another
    # rank's line can land between them, so they are found anywhere in the output, not at a line's start.
    ended = sorted([index, rank, *([message] if message else [])]
                   for index, rank, message in ENDED.findall(out.stdout))
    names = list(CASES)

    def end(name: str) -> list[list[str]]:
        return [e for e in ended if e[0] == str(names.index(name))]

    # stop: read at step 5 itself, every rank stops with the same line; the safe step is the save before it
    stop_line = ("loss is NaN at step 5 on rank 1: training stopped (training.on_nan: stop); the last "
                 "checkpoint before it is step 4")
    assert end("stop") == [["0", "0", stop_line], ["0", "1", stop_line]], said[-4000:]
    assert _steps(paths["stop"][1]) == [2, 4]
    # read every 4 steps: the save at step 6 finds the weights NaN and stops before it; nothing after step 3
    late = end("stop_late")
    assert [e[:2] for e in late] == [["1", "0"], ["1", "1"]] and late[0][2] == late[1][2], said[-4000:]
    assert late[0][2] == ("loss is NaN at step 6 on rank 0: training stopped (training.on_nan: stop); the last "
                          "checkpoint before it is step 3")
    assert _steps(paths["stop_late"][1]) == [3]
    # skip_step: step 3's update is not made; the run trains to its end with finite losses
    assert end("skip") == [["2", "0"], ["2", "1"]], said[-4000:]
    assert said.count("loss is NaN at step 3 on rank 1: the step's update was skipped (training.on_nan: "
                      "skip_step)") == 1
    assert _steps(paths["skip"][1]) == [3, 6]
    # continue: said once, trained to the end
    assert end("continue") == [["3", "0"], ["3", "1"]], said[-4000:]
    assert said.count("loss is NaN at step 2 on rank 0: training goes on (training.on_nan: continue)") == 1

    # the last file ends the processes as `python -m trainer` does: exit 1, the line on every rank's stderr
    last = ("loss is NaN at step 3 on rank 0: training stopped (training.on_nan: stop); the last checkpoint "
            "before it is step 2")
    assert out.returncode != 0
    assert out.stderr.splitlines().count(last) == 2, out.stderr[-3000:]
    assert not [x for x in out.stderr.splitlines() if f'File "{ROOT}/trainer' in x]  # no traceback of ours
    assert _steps(paths["last"][1]) == [2]
    report = triage_run({0: said}, {0: out.returncode})
    assert (report.signature, report.rank, report.summary) == ("nonfinite_loss", 0, last)

    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    nonfinite = [(r["step"], r["rank"], r["value"], r["action"]) for r in records if r.get("kind") == "nonfinite"]
    assert nonfinite == [(5, 1, "NaN", "stopped"), (6, 0, "NaN", "stopped"), (3, 1, "NaN", "skipped"),
                         (2, 0, "NaN", "continued"), (3, 0, "NaN", "stopped")]
