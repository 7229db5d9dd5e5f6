"""The door's replies are typed all the way down: every field of every class a room hands out (a dataclass, a
pydantic model, a NamedTuple), and of the launcher's and trainer's classes those fields hold (through lists,
tuples, unions and dict values), names its type: none is ``Any``, ``object``, a bare ``dict``/``Mapping`` or a
dict of ``Any``; nor are the run events' fields, which the front ends read beside the door. A front end reads
what the type says, never a raw dict it must decode itself (``test_door.py`` checks what the rooms' methods
return)."""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import functools
import importlib
import inspect
import typing
from pathlib import Path

import pytest

import launcher.api
from trainer.wire.json_value import JsonValue

ROOMS = sorted(p.stem for p in Path(launcher.api.__file__).parent.glob("*.py") if not p.stem.startswith("_"))
"""Every module of the door (a helper module without ``__all__`` hands nothing out itself)."""

ALLOWED_ALIASES = {"JsonValue"}
""":data:`trainer.wire.json_value.JsonValue`: JSON kept or passed on as it came (a sweep variant's values as the
user wrote them, the doctor probe's reply for ``doctor --json``): any JSON shape by nature, and still typed
(str, int, float, bool, None, lists and dicts of itself; never ``Any``). At run time its recursion ends in
the unresolved name, allowed here by that name."""

USER_WRITTEN = {
    "Workload.parameters",  # the trainer's or a command's own parameters: the trainer's schema types them
    "Sweep.grid",  # values for those parameters, per key path
    "Sweep.variants",  # the same, one override set each
    "Setting.value",  # one of them, from the grid or a variant
    "ValidationResult.data",  # the workload file as parsed, before its model
    "AppliedOverride.old",  # a --set's value before (or a sentinel: unset) and after
    "AppliedOverride.new",
}
"""What a user wrote in a workload file or a ``--set``, held by ``launcher/workload`` as YAML gave it (``Any``:
in its pydantic models a ``JsonValue`` would change the published schema and refuse YAML's dates); left to
that room, not typed by this guard's change."""

_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_BARE = {dict: "a bare dict", collections.abc.Mapping: "a bare Mapping",
         collections.abc.MutableMapping: "a bare MutableMapping", object: "object"}


def _is_record(cls: object) -> bool:
    """A class whose fields are its data: a dataclass, a pydantic model or a NamedTuple."""
    if not inspect.isclass(cls):
        return False
    if dataclasses.is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields")):
        return True
    return any(base.__module__.startswith("pydantic") and base.__name__ == "BaseModel" for base in cls.__mro__)


@functools.cache
def _checking_names(module: str) -> dict[str, object]:
    """The names ``module`` imports for the type checker only (``if TYPE_CHECKING:``), imported here: its
    string annotations name them."""
    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    names: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            exec(compile(ast.Module(node.body, type_ignores=[]), module, "exec"), names)  # its imports
    return names


def _fields(cls: type) -> dict[str, object]:
    hints = typing.get_type_hints(cls, localns=_checking_names(cls.__module__), include_extras=True)
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
    elif issubclass(cls, tuple):
        names = list(cls._fields)  # type: ignore[attr-defined]
    else:
        names = list(cls.model_fields)  # type: ignore[attr-defined]
    return {name: hints[name] for name in names}


def _untyped(annotation: object, seen: set[type]) -> list[tuple[str, str]]:
    """(field, what) for each untyped part of ``annotation``, walking into the launcher's and trainer's own
    classes once each (``field`` names the class and field where the nested class's is)."""
    if isinstance(annotation, typing.ForwardRef):
        name = annotation.__forward_arg__
        return [] if name in ALLOWED_ALIASES else [("", f"{name!r} does not resolve")]
    if annotation is typing.Any:
        return [("", "Any")]
    if annotation in _BARE:
        return [("", _BARE[annotation])]  # type: ignore[index]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _untyped(args[0], seen)
    if origin in (typing.Literal, typing.ClassVar):
        return []
    if origin in _MAPPINGS:
        return [(f, f"keys: {w}") for f, w in _untyped(args[0], seen)] + \
               [(f, f"values: {w}") for f, w in _untyped(args[1], seen)]
    if origin is not None:  # lists, tuples, unions, callables, type[...]: each argument
        return [p for arg in args if arg is not Ellipsis for p in _untyped(arg, seen)]
    if _is_record(annotation) and annotation.__module__.split(".")[0] in ("launcher", "trainer"):  # type: ignore[union-attr]
        return _class_untyped(annotation, seen)  # type: ignore[arg-type]
    return []


def _class_untyped(cls: type, seen: set[type]) -> list[tuple[str, str]]:
    """``Class.field: what`` for each untyped field of ``cls`` and of the classes its fields hold."""
    if cls in seen:
        return []
    seen.add(cls)
    return [(inner or f"{cls.__name__}.{name}", what)
            for name, hint in _fields(cls).items() for inner, what in _untyped(hint, seen)]


def _replies(room: str) -> list[type]:
    module = importlib.import_module(f"launcher.api.{room}")
    return [value for name in getattr(module, "__all__", ()) if _is_record(value := getattr(module, name))]


@pytest.mark.parametrize("room", ROOMS)
def test_every_field_of_what_a_room_hands_out_is_typed(room):
    seen: set[type] = set()
    found = [f"{field}: {what}" for cls in _replies(room) for field, what in _class_untyped(cls, seen)
             if field not in USER_WRITTEN]
    assert found == []


def test_every_field_of_a_run_event_is_typed():
    """The front ends read the run events (``launcher.events``) beside the door: the same rule."""
    from launcher.events import RunEvent

    seen: set[type] = set()
    found = [f"{field}: {what}" for cls in typing.get_args(RunEvent) for field, what in _class_untyped(cls, seen)
             ]
    assert found == []


@dataclasses.dataclass
class _Typed:
    a: dict[str, list[int]]
    b: tuple[str, ...] | None
    c: collections.abc.Mapping[str, JsonValue]
    d: typing.Literal["x", "y"]


@pytest.mark.parametrize("annotation, what", [
    (typing.Any, "Any"),
    (object, "object"),
    (dict, "a bare dict"),
    (collections.abc.Mapping, "a bare Mapping"),
    (dict[str, typing.Any], "values: Any"),
    (collections.abc.Mapping[str, typing.Any], "values: Any"),
    (list[dict[str, object]] | None, "values: object"),
    (tuple[int, typing.Any], "Any"),
])
def test_the_walk_finds_each_untyped_shape_and_passes_typed_ones(annotation, what):
    typed = dataclasses.make_dataclass("Reply", [("field", annotation)])
    assert [w for _, w in _class_untyped(typed, set())] == [what]
    assert _class_untyped(_Typed, set()) == []
