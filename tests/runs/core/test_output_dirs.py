"""A run's ``output_dir`` compared with other workloads' runs as the node will see it: a folder per run
(``$FSDP_TUI_RUN_ID``) never collides, variables of the workload and ``$HOME`` are expanded before two runs
are compared, and the message shows the folder so expanded."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.runs.core.layout import save_plan
from launcher.runs.core.output_dirs import fixed_output_dir, node_view, output_dir_users
from launcher.runs.core.store import RunStore
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text

WORKLOAD = ("experiment_name: {exp}\ncompute: {{hosts: [fth1]}}\ncommand: run\nenv_variables: {{{env}}}\n"
            "parameters: {{output_dir: '{out}', max_steps: {steps}}}\n")


def _plan(tmp_path: Path, exp: str, out: str, run_id: str, file: str, env: str = "", steps: int = 10):
    result = validate_text(WORKLOAD.format(exp=exp, out=out, env=env, steps=steps), "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id=run_id, source_file=tmp_path / file, node_root="/nodes")


def _recorded(home: Path, plan) -> None:
    directory = RunStore(home).create_run(plan, plan.source_file, "x")
    save_plan(directory, plan)


@pytest.mark.parametrize(("first", "first_env", "second", "second_env", "clash"), [
    ("~/remote-out/$FSDP_TUI_RUN_ID", "", "~/remote-out/$FSDP_TUI_RUN_ID", "", None),  # the per-run pattern
    ("~/remote-out/${FSDP_TUI_RUN_ID}/x", "", "~/remote-out/${FSDP_TUI_RUN_ID}/x", "", None),
    ("~/out", "", "$HOME/out/", "", "~/out"),  # the node's home, written two ways
    ("/data/ckpt", "", "$OUT/ckpt", "OUT: /data", "/data/ckpt"),  # the workload's own variable
    ("$OUT/ckpt", "OUT: /data", "/data//ckpt", "", "/data/ckpt"),  # ... in the recorded run's workload
    ("$OUT/ckpt", "OUT: /a", "$OUT/ckpt", "OUT: /b", None),  # the same text, two folders
    ("$SCRATCH/ckpt", "", "$SCRATCH/ckpt", "", "$SCRATCH/ckpt"),  # the node's own variable: the same there
])
def test_output_dirs_are_compared_as_the_node_sees_them(tmp_path, first, first_env, second, second_env, clash):
    home = tmp_path / "home"
    _recorded(home, _plan(tmp_path, "first", first, "run-first", "a.yaml", first_env))
    plan = _plan(tmp_path, "second", second, "run-second", "b.yaml", second_env, steps=20)
    said = output_dir_users(home, plan)
    if clash is None:
        assert said == ""
    else:
        assert said.startswith(f"{clash} on fth1 is used by another workload's run: run-first"), said
        assert "$HOME" not in said and "$OUT" not in said


def test_the_node_view_of_a_folder():
    assert node_view("${HOME}//a/$X/", {"X": "x"}, "r1") == "~/a/x"
    assert node_view("/o/$FSDP_TUI_RUN_ID", {}, "r1") == "/o/r1"
    assert node_view("s3://b//x/", {}, "r1") == "s3://b//x"
    assert node_view("/", {}, "r") == "/"


def test_a_folder_per_run_is_never_a_fixed_one(tmp_path):
    assert fixed_output_dir(_plan(tmp_path, "e", "~/remote-out/$FSDP_TUI_RUN_ID", "r1", "a.yaml")) is None
    assert fixed_output_dir(_plan(tmp_path, "e", "$OUT/x/", "r1", "a.yaml", "OUT: /data")) == "/data/x"


def test_other_runs_plans_are_read_as_recorded_never_validated_again(tmp_path, monkeypatch):
    """A launch into a fixed folder reads each other run's recorded plan (its variables) once, as recorded:
    no run's plan is rebuilt or its workload validated again at every launch."""
    import launcher.workload.plan as plan_module

    home = tmp_path / "home"
    for i in range(3):
        _recorded(home, _plan(tmp_path, f"first{i}", "$OUT/ckpt", f"run-first{i}", f"a{i}.yaml", "OUT: /data"))
    plan = _plan(tmp_path, "second", "/data/ckpt", "run-second", "b.yaml", steps=20)
    rebuilt = []
    real = plan_module.plan_from_json
    monkeypatch.setattr(plan_module, "plan_from_json", lambda data: rebuilt.append(data["run_id"]) or real(data))
    said = output_dir_users(home, plan)
    assert said.startswith("/data/ckpt on fth1 is used by another workload's run: run-first"), said
    assert rebuilt == []
