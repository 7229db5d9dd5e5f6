"""Words YAML turns into booleans, taken back as the words they were where a key expects a word.

YAML 1.1 (PyYAML, and so every workload and parameters file) reads an unquoted ``off``, ``no`` or
``false`` as ``False`` and ``on``, ``yes`` or ``true`` as ``True``. A key whose values are words (a
``Literal`` or an ``Enum``) that include one of them, as ``activation_checkpointing: off``, would then
refuse the very value the docs show. Every model of the workload and of the trainer's parameters is a
:class:`WordsAsWritten`, so the launcher's validation and the trainer on the nodes read such a key alike:
the boolean becomes the one word of the key's that YAML reads as it. Torch-free (the launcher imports it)."""

from __future__ import annotations

import enum
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ValidationInfo, field_validator

YAML_BOOL_WORDS: dict[bool, frozenset[str]] = {
    False: frozenset({"off", "no", "false"}),
    True: frozenset({"on", "yes", "true"}),
}
"""The words (in any of YAML's cases: ``off``, ``Off``, ``OFF``) PyYAML's resolver reads as each boolean."""


def words_of(annotation: Any) -> tuple[str, ...]:
    """Every word a field of this type takes: its ``Literal`` strings and ``Enum`` string values, found
    through ``X | None``, unions, lists and ``Annotated``."""
    if annotation is None:
        return ()
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return tuple(a for a in typing.get_args(annotation) if isinstance(a, str))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return tuple(m.value for m in annotation if isinstance(m.value, str))
    if origin is not None or isinstance(annotation, types.UnionType):
        return tuple(w for arg in typing.get_args(annotation) for w in words_of(arg))
    return ()


def word_for(value: bool, words: tuple[str, ...]) -> str | None:
    """The one word of ``words`` that YAML reads as ``value``; ``None`` when none (or two) are."""
    found = [w for w in words if w.lower() in YAML_BOOL_WORDS[value]]
    return found[0] if len(found) == 1 else None


def as_written(value: Any, words: tuple[str, ...]) -> Any:
    """``value`` (or each item or mapping value of it) with each boolean that stands for one of ``words``
    turned back into that word."""
    if isinstance(value, bool):
        return word_for(value, words) or value
    if isinstance(value, list) and any(isinstance(v, bool) for v in value):
        return [as_written(v, words) if isinstance(v, bool) else v for v in value]
    if isinstance(value, dict) and any(isinstance(v, bool) for v in value.values()):
        return {k: as_written(v, words) if isinstance(v, bool) else v for k, v in value.items()}
    return value


class WordsAsWritten(BaseModel):
    """A model whose word-valued keys take ``off``/``on``/``yes``/``no`` unquoted, as written."""

    @field_validator("*", mode="before")
    @classmethod
    def _yaml_words(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, (bool, list, dict)) or info.field_name is None:
            return value
        field = cls.model_fields.get(info.field_name)
        words = words_of(field.annotation) if field is not None else ()
        return as_written(value, words) if words else value
