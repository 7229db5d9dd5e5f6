"""``--set key.path=value``: checked against the schema, parsed as YAML, old -> new reported."""

import pytest

from launcher.workload.overrides import apply_overrides, parse_path
from launcher.workload.validate import validate_text

BASE = {"experiment_name": "t", "parameters": {"model_name": "m", "dataset_name": "d", "output_dir": "/o",
                                               "max_steps": 100}}
TEXT = """experiment_name: t
parameters:
  model_name: m
  dataset_name: d
  output_dir: /o
  max_steps: 100
"""


@pytest.mark.parametrize("text, parts", [
    ("a", ("a",)),
    ("parameters.max_steps", ("parameters", "max_steps")),
    ("compute.hosts[1]", ("compute", "hosts", 1)),
    ("a..b", None),
    ("a.[", None),
    ("", None),
])
def test_parse_path(text, parts):
    assert parse_path(text) == parts


@pytest.mark.parametrize("override, path, value", [
    ("parameters.max_steps=20", ("parameters", "max_steps"), 20),
    ("parameters.learning_rate=1e-4", ("parameters", "learning_rate"), 1e-4),
    ("parameters.fsdp.cpu_offload=true", ("parameters", "fsdp", "cpu_offload"), True),
    ("parameters.output_dir=/tmp/x y", ("parameters", "output_dir"), "/tmp/x y"),
    ("compute.hosts=[a, b]", ("compute", "hosts"), ["a", "b"]),
    ("env_variables.NCCL_DEBUG=INFO", ("env_variables", "NCCL_DEBUG"), "INFO"),
    ("experiment_name=other", ("experiment_name",), "other"),
])
def test_override_applies_parsed_value(override, path, value):
    data, applied, problems = apply_overrides(BASE, [override])
    assert problems == []
    node = data
    for part in path:
        node = node[part]
    assert node == value
    assert [a.path for a in applied] == [path]


def test_override_reports_old_and_new_and_keeps_input_unchanged():
    data, applied, _ = apply_overrides(BASE, ["parameters.max_steps=20", "parameters.seed=3"])
    assert [a.describe() for a in applied] == ["parameters.max_steps: 100 -> 20", "parameters.seed: <unset> -> 3"]
    assert BASE["parameters"]["max_steps"] == 100


@pytest.mark.parametrize("override, message, hint", [
    ("parameters.max_stpes=20", "unknown key 'max_stpes'", "did you mean 'max_steps'?"),
    ("compute.num_acelerators=2", "unknown key 'num_acelerators'", "did you mean 'num_accelerators'?"),
    ("parameters.fsdp.shardin=x", "unknown key 'shardin'", "did you mean 'sharding'?"),
    ("nonsense", "is not key.path=value", "--set parameters.max_steps=20"),
])
def test_bad_override_is_a_problem_naming_the_option(override, message, hint):
    _, applied, problems = apply_overrides(BASE, ["parameters.seed=1", override])
    assert len(problems) == 1
    p = problems[0]
    assert (p.file, p.line) == ("--set", 2)
    assert message in p.message and hint in p.hint
    assert len(applied) == 1


def test_invalid_override_value_is_reported_at_the_option():
    result = validate_text(TEXT, "w.yaml", ["parameters.max_steps=-3"])
    assert [(p.file, p.line, p.path) for p in result.errors] == [("--set", 1, "parameters.max_steps")]


def test_free_form_parameters_accept_any_key_with_a_command():
    text = "experiment_name: t\ncommand: python x.py\nparameters:\n  a: 1\n"
    result = validate_text(text, "w.yaml", ["parameters.anything.deep=3"])
    assert result.ok and result.workload.parameters["anything"] == {"deep": 3}
