"""Walk the pydantic models by dotted path: which keys exist where, and which values a field allows.

Used for "did you mean" on unknown keys and values, for ``--set`` path checks, and for the editor's
help on the key under the cursor.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from launcher.workload.model import Workload
from trainer.config import TrainerConfig

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class FieldHelp:
    """What the editor shows for a key: its dotted path, type, default and docstring."""

    path: str
    type_name: str
    default: str
    description: str
    choices: tuple[str, ...] = ()


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
    if status != "ok" or field is None:
        return None
    default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
    if len(default) > 60:
        default = default[:57] + "..."
    return FieldHelp(
        path=format_path(path),
        type_name=_type_name(field.annotation),
        default=default,
        description=(field.description or "").strip(),
        choices=literal_choices(field),
    )


def _type_name(annotation: Any) -> str:
    inner = _unwrap(annotation)
    if _is_model(inner):
        return "mapping"
    name = getattr(inner, "__name__", None)
    return name if name and typing.get_origin(inner) is None else str(inner).replace("typing.", "")
