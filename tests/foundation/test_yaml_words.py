"""Every value the docs show works as written: each word every key of the schema takes (the workload's and
the built-in trainer's parameters), written unquoted in the file, is taken as that word, even where YAML
reads it as a boolean (``activation_checkpointing: off``); the trainer on a node reads the parameters file
the plan writes the same way; and a refused value is quoted as the user typed it."""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from launcher.workload.load import plan_file
from launcher.workload.model import Workload
from launcher.workload.validate import validate_text
from trainer.wire.config import TrainerConfig
from trainer.wire.yaml_words import WordsAsWritten, word_for, words_of

BASE = {
    "experiment_name": "words",
    "compute": {"accelerator_type": "CPU", "procs_per_node": 2, "num_accelerators": 2},
    "parameters": {"model_name": "builtin:tiny-llama", "dataset_name": "builtin:tiny-alpaca", "output_dir": "outputs"},
}
MARK = "WORD_GOES_HERE"


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is not None or isinstance(annotation, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def _is_list(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        return True
    return (origin is typing.Union or isinstance(annotation, types.UnionType)) and any(
        _is_list(a) for a in typing.get_args(annotation))


def _is_dict(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin is dict or ((origin is typing.Union or isinstance(annotation, types.UnionType)) and any(
        _is_dict(a) for a in typing.get_args(annotation)))


def word_keys(model: type[BaseModel], path: tuple = ()) -> Iterator[tuple[tuple, tuple[str, ...], str]]:
    """(path, words, ``list``/``dict``/``one``: how the key holds them) of every key that takes words, walked through the nested models (a list
    of models: its first item)."""
    for name, field in model.model_fields.items():
        here = (*path, name)
        words = words_of(field.annotation)
        if words:
            yield here, words, "list" if _is_list(field.annotation) else "dict" if _is_dict(field.annotation) else "one"
        for inner in _models(field.annotation):
            yield from word_keys(inner, (*here, 0) if _is_list(field.annotation) else here)
        if model is Workload and name == "parameters":
            yield from word_keys(TrainerConfig, here)


CASES = [(path, word, many) for path, words, many in word_keys(Workload) for word in words]


def _nested(path: tuple, value: Any) -> Any:
    for part in reversed(path):
        value = [value] if isinstance(part, int) else {part: value}
    return value


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def _text(path: tuple, word: str, many: str = "one") -> str:
    data = _merge(BASE, _nested(path, {"list": [MARK], "dict": {"speaker": MARK}}.get(many, MARK)))
    return yaml.safe_dump(data, sort_keys=False).replace(MARK, word)  # the word unquoted, as a user types it


def test_the_walk_sees_the_schemas_words():
    keys = {".".join(str(p) for p in path) for path, _, _ in CASES}
    assert "parameters.model.activation_checkpointing" in keys and "parameters.fsdp.sharding" in keys
    assert "notify.email.security" in keys and "notify.on" in keys
    assert ("parameters.model.activation_checkpointing", "off", "one") in [
        (".".join(map(str, p)), w, m) for p, w, m in CASES]


@pytest.mark.parametrize(("path", "word", "many"), CASES, ids=[f"{'.'.join(map(str, p))}={w}" for p, w, _ in CASES])
def test_every_word_of_the_schema_written_unquoted_is_taken(path, word, many):
    text = _text(path, word, many)
    report = validate_text(text, "w.yaml")
    dotted = ".".join(str(p) for p in path if not isinstance(p, int))
    # The value is taken (a rule across keys may still say something: nf4 on CPU nodes)
    here = [p for p in report.problems if p.path.replace("[0]", "") == dotted and p.is_error
            and ("is not one of" in p.message or "expected" in p.message or "got" in p.message)]
    assert not here, (text, [p.format() for p in here])


def test_the_trainer_reads_the_plans_parameters_as_the_launcher_did(tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text(_text(("parameters", "model", "activation_checkpointing"), "off"))
    planned = plan_file(wl, [], home=tmp_path, run_id="r1")
    assert planned.plan is not None, [p.format() for p in planned.problems]
    on_the_node = TrainerConfig.model_validate(yaml.safe_load(planned.plan.parameters_yaml))
    assert on_the_node.model.activation_checkpointing == "off"


@pytest.mark.parametrize(("value", "typed"), [("yes", "yes"), ("Off", "Off"), ("1e3", "1e3"), ("~", "~"),
                                              ("nope", "nope")])
def test_a_refused_word_is_quoted_as_typed(value, typed):
    text = _text(("parameters", "fsdp", "sharding"), value)
    problems = [p for p in validate_text(text, "w.yaml").problems if p.path == "parameters.fsdp.sharding"]
    assert len(problems) == 1 and f"'{typed}' is not one of" in problems[0].message, [p.format() for p in problems]


def test_a_set_value_is_quoted_as_typed():
    text = _text(("parameters", "fsdp", "sharding"), "full_shard")
    report = validate_text(text, "w.yaml", overrides=["parameters.fsdp.sharding=on"])
    problems = [p for p in report.problems if p.path == "parameters.fsdp.sharding"]
    assert len(problems) == 1 and "'on' is not one of" in problems[0].message, [p.format() for p in problems]


class Mode(str, enum.Enum):
    ON = "on"
    FAST = "fast"


class _Both(WordsAsWritten):
    a: typing.Literal["off", "full"] = "full"
    b: list[typing.Literal["no", "x"]] = []
    c: Mode | None = None
    d: typing.Literal["off", "false"] = "off"
    e: bool = False
    f: dict[str, typing.Literal["no", "y"]] = {}


def test_the_rule_itself():
    assert word_for(False, ("off", "full")) == "off" and word_for(True, ("off", "full")) is None
    assert word_for(False, ("off", "false")) is None  # two words YAML reads as False: which one is unknown
    got = _Both.model_validate({"a": False, "b": [False, "x"], "c": True, "e": "yes", "f": {"k": False}})
    assert (got.a, got.b, got.c, got.e, got.f) == ("off", ["no", "x"], Mode.ON, True, {"k": "no"})
    with pytest.raises(ValueError):
        _Both.model_validate({"d": False})
