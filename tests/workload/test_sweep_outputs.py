"""Sweep variants never share checkpoints: a fixed ``output_dir`` the variants would share is made per
variant (``<dir>/$FSDP_TUI_RUN_ID``) with a warning, at ``validate`` and at ``sweep --dry-run``, unless
the sweep shares it on purpose; a user script's is only warned about."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launcher.workload.sweep import plan_sweep
from launcher.workload.sweep_outputs import is_per_run
from launcher.workload.validate import validate_file
from tests.support.sweep_base import SWEEP_BASE

FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
GRID = "sweep:\n  grid:\n    parameters.fsdp.sharding: [full_shard, no_shard]\n"


@pytest.mark.parametrize(("output_dir", "own"), [
    ("outputs", True), ("checkpoints/a", True),  # relative: inside each run's folder
    ("/ckpt/$FSDP_TUI_RUN_ID", True), ("~/runs/${FSDP_TUI_RUN_ID}/x", True),
    ("/ckpt/sweep", False), ("~/fsdp-runs/x", False), ("$HOME/x", False), ("s3://bucket/x", False),
])
def test_which_output_dirs_are_a_runs_own(output_dir, own):
    assert is_per_run(output_dir) is own


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return path


FIXED = SWEEP_BASE.replace("output_dir: outputs", "output_dir: /ckpt/shared")
WARNING = ("{f}:6:15: warning: parameters.output_dir: variants 1-2 would share output_dir '/ckpt/shared' and resume "
           "each other's checkpoints: each writes to /ckpt/shared/$FSDP_TUI_RUN_ID instead (set "
           "sweep.share_output_dir: true to share it on purpose)")


def test_a_fixed_output_dir_is_made_per_variant_with_a_warning(tmp_path):
    path = _file(tmp_path, FIXED + GRID)
    plan = plan_sweep(path, home=tmp_path)
    assert plan.ok
    assert [p.format() for p in plan.problems] == [WARNING.format(f=path)]
    assert [v.overrides[-1] for v in plan.variants] == ["parameters.output_dir=/ckpt/shared/$FSDP_TUI_RUN_ID"] * 2
    assert [v.plan.workload.parameters["output_dir"] for v in plan.variants] == ["/ckpt/shared/$FSDP_TUI_RUN_ID"] * 2
    assert [v.label for v in plan.variants] == ["sharding=full_shard", "sharding=no_shard"]  # the label is the axes
    assert [p.format() for p in validate_file(path).problems] == [WARNING.format(f=path)]
    # the same through the console script a user runs
    out = subprocess.run([FSDP_TUI, "sweep", str(path), "--dry-run"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert WARNING.format(f=path) in out.stderr.splitlines()
    assert out.stdout.count("--set parameters.output_dir=/ckpt/shared/$FSDP_TUI_RUN_ID\n") == 2


@pytest.mark.parametrize(("text", "over", "own_folders", "warned"), [
    (FIXED + GRID + "  share_output_dir: true\n", [], [(), ()], False),  # shared on purpose
    (SWEEP_BASE + GRID, [], [(), ()], False),  # relative: per run already
    (FIXED + "sweep:\n  grid:\n    parameters.output_dir: [/ckpt/a, /ckpt/b]\n", [], [(), ()], False),  # varied
    (FIXED, ["parameters.max_steps=2,3,4"], [("parameters.output_dir=/ckpt/shared/$FSDP_TUI_RUN_ID",)] * 3, True),
    (FIXED.replace("parameters:", "command: python train.py\nparameters:") + GRID, [], [(), ()], True),  # a script
], ids=["opted-in", "relative", "varied", "over-axis", "user-script"])
def test_when_variants_keep_or_get_their_own_folder(tmp_path, text, over, own_folders, warned):
    plan = plan_sweep(_file(tmp_path, text), over, home=tmp_path)
    assert plan.ok, [p.format() for p in plan.problems]
    assert [v.own_folder for v in plan.variants] == own_folders
    said = [p.message for p in plan.problems if p.path == "parameters.output_dir"]
    assert len(said) == int(warned), said
    if warned and "command" in text:
        assert said == ["variants 1-2 give your script the same output_dir '/ckpt/shared': they write into one folder"]
    if over:
        assert said[0].startswith("variants 1-3 would share")
