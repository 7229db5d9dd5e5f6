"""Walk the pydantic models by dotted path: which keys exist where, and which values a field allows.

Used for "did you mean" on unknown keys and values, for ``--set`` path checks, and for the editor's
help on the key under the cursor.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from launcher.workload.model import Workload
from trainer.wire import field_docs
from trainer.wire.config import TrainerConfig

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class FieldHelp:
    """What the editor shows for a key: its dotted path, type, default and docstring."""

    path: str
    type_name: str
    """The annotation's name (``bool``, ``mapping``, ``list[str]``): what completion decides by."""
    default: str
    """In words: ``required``, ``not set``, ``auto``, ``true``, ``none`` (an empty list or mapping)..."""
    description: str
    """The field's docstring as plain text: one paragraph, no reStructuredText markup."""
    choices: tuple[str, ...] = ()
    kind: str = ""
    """What the value is, in words (``a whole number``, ``one of auto, full_shard``, ``a section``)."""

    def headline(self) -> str:
        """``parameters.max_steps: a whole number (default: 1000)``, the first line of the editor's help."""
        if self.default == "required":
            return f"{self.path}: {self.kind}, required"
        return f"{self.path}: {self.kind} (default: {self.default})"


def _unwrap(annotation: Any) -> Any:
    """Strip ``Optional`` and collection wrappers down to the model or scalar type inside."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if models else (args[0] if len(args) == 1 else annotation)
    return annotation


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def parameters_model(data: dict[str, Any] | None) -> type[BaseModel] | None:
    """The schema of ``parameters``: the trainer's when the workload has no ``command``."""
    if isinstance(data, dict) and data.get("command") is not None:
        return None
    return TrainerConfig


def resolve(path: Path, data: dict[str, Any] | None) -> tuple[type[BaseModel] | None, FieldInfo | None, str]:
    """Follow ``path`` through the schema.

    Returns ``(parent_model, field, status)`` where status is ``"ok"``, ``"free"`` (inside a
    free-form mapping such as ``env_variables``), or ``"unknown"`` (the last part is not a key of
    ``parent_model``).
    """
    model: type[BaseModel] | None = Workload
    field: FieldInfo | None = None
    for depth, part in enumerate(path):
        if model is None:
            return None, None, "free"
        if isinstance(part, int):
            continue
        if model is Workload and part == "parameters" and depth + 1 < len(path):
            model = parameters_model(data)
            field = None
            continue
        fields = model.model_fields
        if part not in fields:
            return model, None, "unknown"
        field = fields[part]
        inner = _unwrap(field.annotation)
        origin = typing.get_origin(inner)
        if _is_model(inner):
            if depth + 1 < len(path):
                model = inner
        elif origin in (list, tuple) and depth + 1 < len(path) and isinstance(path[depth + 1], int):
            item = _unwrap(typing.get_args(inner)[0]) if typing.get_args(inner) else None
            model = item if _is_model(item) else None
        elif depth + 1 < len(path):
            # A mapping (env_variables, secrets, free-form parameters) or a scalar with children.
            return None, field, "free" if origin is dict or inner is dict else "unknown"
    return model, field, "ok"


def keys_at(path: Path, data: dict[str, Any] | None) -> tuple[str, ...]:
    """Keys allowed in the mapping at ``path`` (empty when free-form)."""
    model, field, status = resolve(path, data)
    if status != "ok":
        return ()
    if field is None:
        target = model
    else:
        inner = _unwrap(field.annotation)
        target = inner if _is_model(inner) else None
        if path and path[-1] == "parameters":
            target = parameters_model(data)
    return tuple(target.model_fields) if target is not None else ()


def holds_many(path: Path, data: dict[str, Any] | None) -> bool:
    """The key at ``path`` holds a list or a mapping (``compute.hosts``, ``env_variables``)."""
    _, field, status = resolve(path, data)
    if status != "ok" or field is None:
        return False
    inner = _unwrap(field.annotation)
    return typing.get_origin(inner) in (list, tuple, dict) or inner is dict


def literal_choices(field: FieldInfo | None) -> tuple[str, ...]:
    if field is None:
        return ()
    inner = _unwrap(field.annotation)
    if typing.get_origin(inner) is Literal:
        return tuple(str(a) for a in typing.get_args(inner))
    return ()


def help_for(path: Path, data: dict[str, Any] | None) -> FieldHelp | None:
    """Documentation for the key at ``path``, or ``None`` for free-form or unknown keys."""
    from launcher.workload.problems import format_path

    if path == ("parameters",) and parameters_model(data) is not None:
        return FieldHelp("parameters", "mapping", "{}", "Parameters of the built-in trainer "
                         "(written to HYPERPARAMETERS_PATH on each node).")
    model, field, status = resolve(path, data)
    if status != "ok" or field is None or model is None:
        return None
    name = next(n for n, f in model.model_fields.items() if f is field)
    default = "required" if field.is_required() else _default_words(field.get_default(call_default_factory=True))
    if len(default) > 60:
        default = default[:57] + "..."
    choices = literal_choices(field)
    return FieldHelp(
        path=format_path(path),
        type_name=_type_name(field.annotation),
        default=default,
        description=plain_text(field_docs.description(model, name) or ""),
        choices=choices,
        kind=_kind_words(field.annotation),
    )


_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_RST_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(doc: str) -> str:
    """A docstring as a user reads it in the editor: one paragraph, literals as they are typed (no
    reStructuredText double backticks or ``:role:`` markup)."""
    text = _RST_ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], doc)
    text = _RST_LITERAL.sub(r"\1", text)
    return " ".join(text.split())


def _default_words(value: Any) -> str:
    """A default as the YAML that would set it: ``true``, ``auto``, ``0.5``; ``not set`` for none."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseModel):
        return "its keys' defaults"
    if isinstance(value, (list, tuple, dict)) and not value:
        return "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(_default_words(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_default_words(v)}" for k, v in value.items())
    return str(value)


_SCALAR_WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}


def _kind_words(annotation: Any) -> str:
    """What a field holds, in words: ``a whole number``, ``one of auto, full_shard``, ``a list of text``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        words = list(dict.fromkeys(_kind_words(a) for a in args))
        return " or ".join(words) if words else "empty"
    if _is_model(annotation):
        return "a section of keys"
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(annotation))
    if origin in (list, tuple):
        inner = typing.get_args(annotation)
        item = _kind_words(inner[0]) if inner else "values"
        return "a list of " + ("sections" if item == "a section of keys" else item.removeprefix("a "))
    if origin is dict or annotation is dict:
        return "a mapping"
    if origin is typing.Annotated:
        return _kind_words(typing.get_args(annotation)[0])
    return _SCALAR_WORDS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _type_name(annotation: Any) -> str:
    inner = _unwrap(annotation)
    if _is_model(inner):
        return "mapping"
    name = getattr(inner, "__name__", None)
    return name if name and typing.get_origin(inner) is None else str(inner).replace("typing.", "")


def workload_schema() -> dict[str, Any]:
    """The JSON Schema of workload files (``fsdp-tui schema``, for yaml-language-server); ``parameters`` follows the trainer's schema when there is no ``command``."""
    field_docs.models_under(Workload, TrainerConfig)  # both schemas' $defs in one: no two models of one name
    schema = field_docs.fill_schema(Workload.model_json_schema(), Workload)
    trainer = field_docs.fill_schema(TrainerConfig.model_json_schema(), TrainerConfig)
    defs = schema.setdefault("$defs", {})
    defs.update(trainer.pop("$defs", {}))
    defs["TrainerConfig"] = trainer
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "fsdp-tui workload"
    schema["if"] = {"not": {"required": ["command"]}}
    schema["then"] = {"properties": {"parameters": {"$ref": "#/$defs/TrainerConfig"}}}
    return schema
