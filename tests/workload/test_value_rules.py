"""One set of rules for every value, wherever it is written: the same value refused at the same key from
the file and from ``--set`` (and a sweep's variant, which is a ``--set``), each at its own line, in one
line of text. Table-driven and pure; the real launch of such values is in ``tests/runs/core/test_bad_day.py``."""

from __future__ import annotations

import typing

import annotated_types
import pytest
from pydantic import BaseModel

from launcher.workload.hosts import parse_host
from launcher.workload.model import Workload
from launcher.workload.overrides import apply_overrides
from launcher.workload.validate import validate_text
from launcher.workload.yaml_loader import load_value, load_yaml

BASE = """\
experiment_name: rules
compute:
  accelerator_type: CPU
  procs_per_node: 2
  hosts: [rp1, rp2]
ssh:
  user: bob
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: outputs
  learning_rate: 0.003
"""

# (key, value as YAML text, words of the error): each refused from a file and from --set alike.
REFUSED = [
    ("compute.procs_per_node", "1" + "0" * 400, "digits"),
    ("compute.procs_per_node", "1" + "0" * 5000, "digits"),
    ("compute.procs_per_node", "4096", "less than or equal to 1024"),
    ("compute.num_accelerators", "99999999999999999999", "out of range"),
    ("max_retries", "1.0e+400", "finite"),
    ("timeout_minutes", ".inf", "finite"),
    ("parameters.learning_rate", ".inf", "finite"),
    ("parameters.learning_rate", "-.inf", "finite"),
    ("parameters.optim.weight_decay", ".nan", "finite"),
    ("parameters.max_steps", "99999999999999999999", "out of range"),
    ("parameters.seed", "-1", "greater than or equal to 0"),
    ("parameters.seed", str(2**40), "less than"),
    ("ssh.user", "-oProxyCommand=touch /tmp/x", "not a valid user name"),
    ("ssh.user", '"root\\n"', "control character"),
    ("ssh.user", '"bo\\x1bb"', "control character"),
    ("ssh.proxy_jump", "-oProxyCommand=x", "read as an ssh option"),
    ("ssh.proxy_jump", "jump1,-J", "read as an ssh option"),
    ("ssh.proxy_jump", '"jump\\nhost"', "control character"),
    ("ssh.port", "٢٢", "whole number"),
    ("ssh.identity_file", "-oProxyCommand=x", "read as an option"),
    ("ssh.known_hosts", '"/tmp/k\\n"', "control character"),
    ("compute.master_addr", "-x", "read as an option"),
    ("compute.hosts[0]", '"root\\n@rp1"', "control character"),
    ("compute.hosts[0]", '"rp1\\n"', "control character"),
    ("compute.hosts[0]", "rp1:٢٢", "digits 0-9"),
    ("compute.hosts[1]", "-oProxyCommand=x", "read as an ssh option"),
    ("compute.hosts[1]", "rp2:70000", "from 1 to 65535"),
    ("parameters.model_name", '"a\\0b"', "NUL byte"),
    ("env_variables.FOO", '"x\\0"', "NUL"),
]


def _nested(key: str, value: str) -> str:
    """``BASE`` with ``key`` set to ``value`` in the file itself (the key's line replaced or added)."""
    from launcher.workload.overrides import parse_path

    path = parse_path(key)
    data_lines = BASE.splitlines()
    if path[:2] == ("compute", "hosts"):
        hosts = ["rp1", "rp2"]
        hosts[path[2]] = "§"
        return BASE.replace("hosts: [rp1, rp2]", "hosts: [" + ", ".join(hosts).replace("§", value) + "]")
    head, last = path[:-1], path[-1]
    text = "\n".join(data_lines) + "\n"
    for line in data_lines:
        if line.strip().startswith(f"{last}:") and (len(head) == 0) == (not line.startswith(" ")):
            return text.replace(line, line.split(":")[0] + f": {value}", 1)
    if not head:
        return text + f"{last}: {value}\n"
    if head == ("parameters", "optim"):
        return text + f"  optim:\n    {last}: {value}\n"
    if head[0] in ("compute", "ssh", "parameters"):
        return text.replace(f"{head[0]}:\n", f"{head[0]}:\n  {last}: {value}\n", 1)
    return text + f"{head[0]}:\n  {last}: {value}\n"


@pytest.mark.parametrize(("key", "value", "words"), REFUSED, ids=[f"{k}={v[:20]}" for k, v, _ in REFUSED])
def test_a_value_is_refused_alike_from_the_file_and_from_set_at_its_own_line(key, value, words):
    from_file = validate_text(_nested(key, value), "w.yaml")
    from_set = validate_text(BASE, "w.yaml", [f"{key}={value}"])
    for result, where in ((from_file, "w.yaml"), (from_set, "--set")):
        errors = [p for p in result.errors if p.path == key]
        assert errors, (where, [p.format() for p in result.problems])
        assert any(words in p.format() for p in errors), [p.format() for p in errors]
        assert all(p.file == where for p in errors)
        assert all("\n" not in p.format() and len(p.format()) < 600 for p in result.problems)
        assert result.workload is None
    [line] = {p.line for p in from_file.errors if p.path == key}
    assert _nested(key, value).splitlines()[line - 1].lstrip().startswith(("- ", key.split(".")[-1].split("[")[0]))


@pytest.mark.parametrize("value", ["rp1", "bob@rp1", "bob@rp1:2222", "user.name@[::1]:22", "node-0.lab", "localhost"])
def test_good_hosts_stay_good(value):
    assert parse_host(value).hostname


def test_a_nul_byte_and_a_newline_in_a_key_are_placed_where_they_are():
    result = load_yaml('experiment_name: x\ncommand: "a"\nparameters:\n  k: "x\x00y"\n', "w.yaml")
    [p] = result.problems
    assert (p.line, p.column) == (4, 8) and "U+0000" in p.message
    result = validate_text('experiment_name: x\ncommand: echo\nparameters:\n  "a\\nb": 1\n', "w.yaml")
    [p] = [p for p in result.errors if "control character" in p.message]
    assert p.line == 4 and p.format().count("\n") == 0 and "a\\nb" in p.format()


ALIAS_BOMB = "{" + ", ".join(
    [f"l0: &l0 [{', '.join(['x'] * 9)}]"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]) + "}"
"""Nine levels of nine aliases: 9**9 (387 million) strings when written out."""


def test_an_alias_bomb_through_set_spends_the_files_budget_and_stops_there(monkeypatch):
    loaded = load_value(ALIAS_BOMB)
    assert "alias bomb" in loaded.error and loaded.value is None
    result = validate_text(BASE, "w.yaml", [f"compute.hosts={ALIAS_BOMB}"])
    [p] = result.errors
    assert p.file == "--set" and "alias bomb" in p.message and result.workload is None
    # One budget for the file and its overrides: a value that fits alone does not fit after a big file.
    from launcher.workload import validate, yaml_loader

    monkeypatch.setattr(yaml_loader, "MAX_VALUES", 1000)
    monkeypatch.setattr(validate, "MAX_VALUES", 1000)
    big = BASE.replace("hosts: [rp1, rp2]", "hosts: [" + ", ".join(["h"] * 900) + "]")
    assert 900 < load_yaml(big, "w.yaml").used < 950
    hundred = "[" + ", ".join(["h"] * 100) + "]"
    assert not any("too many" in p.message for p in validate_text(BASE, "w.yaml", [f"compute.hosts={hundred}"]).problems)
    result = validate_text(big, "w.yaml", [f"env_variables.X={hundred}"])
    assert any("too many values" in p.message and p.file == "--set" for p in result.errors)
    _data, _applied, problems = apply_overrides({}, ["compute.hosts=[a, b, c]"], budget=2)
    assert problems and "too many values" in problems[0].message


BLOCK_BOMB = "\n".join(
    ["l0: &l0"] + ["- x"] * 9
    + [line for i in range(1, 9) for line in [f"l{i}: &l{i}"] + [f"- *l{i - 1}"] * 9])
"""The same bomb in block style: no comma, so ``--over`` (which splits its values at commas) reads it whole."""


def test_a_sweep_over_value_has_the_same_budget():
    from launcher.workload.problems import Problem
    from launcher.workload.sweep import parse_over

    bomb = parse_over(1, f"compute.hosts={BLOCK_BOMB}")
    assert isinstance(bomb, Problem) and "alias bomb" in bomb.message and "\n" not in bomb.format()
    assert parse_over(1, "parameters.fsdp.sharding=full_shard,no_shard") == (
        "parameters.fsdp.sharding", ["full_shard", "no_shard"])


def _numeric_fields(model: type[BaseModel], prefix: str = "", seen: set | None = None):
    seen = set() if seen is None else seen
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        flat = []
        for arg in typing.get_args(field.annotation) or (field.annotation,):
            flat += list(typing.get_args(arg)) or [arg]
        for arg in flat:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from _numeric_fields(arg, f"{prefix}{name}.", seen)
        if any(arg in (int, float) for arg in flat) and str not in flat:
            yield f"{prefix}{name}", field


def test_every_number_of_the_workload_has_a_range_and_no_infinity():
    """A count the launch multiplies, stores or hands to a node has an upper bound in the schema itself."""
    unbounded = [name for name, field in _numeric_fields(Workload)
                 if not any(isinstance(m, (annotated_types.Le, annotated_types.Lt)) for m in field.metadata)]
    assert unbounded == []
    assert Workload.model_config.get("allow_inf_nan") is False


def test_a_sweep_of_millions_of_variants_is_refused_at_its_line_without_building_them():
    from launcher.workload.sweep_check import MAX_VARIANTS

    axes = "".join(f"    parameters.x{i}: [{', '.join(str(v) for v in range(10))}]\n" for i in range(8))
    text = BASE.replace("experiment_name: rules\n", "experiment_name: rules\nsweep:\n  grid:\n" + axes)
    result = validate_text(text, "w.yaml")
    [p] = [p for p in result.errors if p.path == "sweep"]
    assert p.line == 2 and f"more than {MAX_VARIANTS:,} variants" in p.message
