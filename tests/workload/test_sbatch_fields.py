"""SLURM fields that become ``#SBATCH --name=value`` lines: one word each, refused with the key named by
``validate`` and ``--set`` alike, and refused again by the script writer."""

from __future__ import annotations

import pytest

from launcher.backends.slurm.script import batch_script
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text

BASE = "experiment_name: x\ncommand: echo hi\ncompute:\n  slurm:\n    login: local\n"
FIELDS = ("partition", "account", "qos", "constraint")
BAD = [("newline", "x\ntouch /tmp/pwned"), ("carriage return", "x\rtouch"), ("space", "a b"), ("tab", "a\tb"),
       ("escape", "a\x1b]2;t\x07"), ("empty", "")]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("what,value", BAD, ids=[w for w, _ in BAD])
def test_a_field_with_whitespace_or_controls_is_refused_naming_the_key(field, what, value):
    import json

    in_file = validate_text(BASE + f"    {field}: {json.dumps(value)}\n", "w.yaml")
    by_set = validate_text(BASE, "w.yaml", overrides=[f"compute.slurm.{field}={json.dumps(value)}"])
    for result in (in_file, by_set):
        [problem] = result.errors
        assert problem.path == f"compute.slurm.{field}" and result.workload is None
    assert in_file.errors[0].file == "w.yaml" and in_file.errors[0].line == 6
    assert by_set.errors[0].file == "--set"


def test_good_values_reach_the_script_and_the_writer_refuses_a_bad_one_again():
    result = validate_text(BASE + "    partition: gpu,debug\n    constraint: a100&ib\n    account: proj-1\n")
    assert result.ok, result.problems
    plan = build_plan(result.workload, run_id="r1")
    script = batch_script(plan, 1, "python3")
    assert "#SBATCH --partition=gpu,debug\n" in script and "#SBATCH --constraint=a100&ib\n" in script
    slurm = plan.workload.compute.slurm.model_copy(update={"account": "x\ntouch /tmp/pwned"})
    bad = plan.workload.model_copy(update={"compute": plan.workload.compute.model_copy(update={"slurm": slurm})})
    from dataclasses import replace

    with pytest.raises(ValueError, match="compute.slurm.account"):
        batch_script(replace(plan, workload=bad), 1, "python3")
