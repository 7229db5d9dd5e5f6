"""``--set a.b=value``: change one key of a workload from the command line, checked against the schema."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from launcher.workload import schema_walk
from launcher.workload.problems import Problem, did_you_mean, format_path
from launcher.workload.yaml_loader import MAX_VALUES, load_value

SOURCE = "--set"
_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)|\[([0-9]+)\]")
_UNSET = object()
_FLOAT = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")


@dataclass(frozen=True)
class AppliedOverride:
    """One override that took effect; ``index`` is its 1-based position on the command line."""

    index: int
    path: tuple[str | int, ...]
    old: Any
    new: Any

    def describe(self) -> str:
        old = "<unset>" if self.old is _UNSET else _show(self.old)
        return f"{format_path(self.path)}: {old} -> {_show(self.new)}"


@dataclass(frozen=True)
class SetValue:
    """An override whose value is data, not YAML text: a path a node reported (``.../step-11-a #b``) is set
    exactly, never parsed (``#`` would start a comment, ``: `` a mapping)."""

    key: str
    """The dotted key path, as ``--set`` writes it."""
    value: Any

    def __str__(self) -> str:
        return f"{self.key}={_show(self.value)}"


Override = str | SetValue
"""``key.path=value`` text from the command line, or a :class:`SetValue` from the program itself."""


def _show(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def parse_path(text: str) -> tuple[str | int, ...] | None:
    """``parameters.fsdp.sharding`` or ``compute.hosts[1]`` -> parts; ``None`` if malformed."""
    parts: list[str | int] = []
    pos = 0
    while pos < len(text):
        if parts and text[pos] == ".":
            pos += 1
        match = _PART.match(text, pos)
        if match is None:
            return None
        parts.append(match.group(1) if match.group(1) is not None else int(match.group(2)))
        pos = match.end()
    return tuple(parts) or None


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[Override], budget: int = MAX_VALUES
) -> tuple[dict[str, Any], list[AppliedOverride], list[Problem]]:
    """Apply every ``key.path=value``; returns the new data, what changed, and problems (all of them).
    Values are read as a workload file's are, from what is left of its budget (``budget`` values)."""
    data = copy.deepcopy(data)
    applied: list[AppliedOverride] = []
    problems: list[Problem] = []
    for index, item in enumerate(overrides, start=1):
        text = str(item)

        def problem(path: str, message: str, hint: str = "", *, index: int = index, text: str = text) -> None:
            problems.append(Problem(SOURCE, index, 1, path, "error", message, hint, origin=text))

        if isinstance(item, SetValue):
            key, sep, raw_value = item.key, "=", ""
        else:
            key, sep, raw_value = text.partition("=")
        path = parse_path(key.strip())
        if not sep or path is None:
            problem("", f"'{text}' is not key.path=value", "e.g. --set parameters.max_steps=20")
            continue
        model, _field, status = schema_walk.resolve(path, data)
        if status == "unknown":
            last = path[-1]
            choices = tuple(model.model_fields) if model is not None else ()
            hint = did_you_mean(str(last), choices) if choices else ""
            problem(format_path(path), f"unknown key '{last}'", hint)
            continue
        if isinstance(item, SetValue):
            value = item.value
        else:
            loaded = load_value(raw_value, budget)
            budget -= loaded.used
            if loaded.error:
                problem(format_path(path), loaded.error)
                continue
            value = loaded.value
            if isinstance(value, str) and _FLOAT.fullmatch(value):
                value = float(value)  # YAML 1.1 reads 1e-4 as text; people mean a number
        error = _assign(data, path, value, applied, index)
        if error:
            problem(format_path(path), error)
    return data, applied, problems


def _assign(data: dict[str, Any], path: tuple[str | int, ...], value: Any,
            applied: list[AppliedOverride], index: int) -> str:
    node: Any = data
    for depth, part in enumerate(path[:-1]):
        nxt = path[depth + 1]
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return f"there is no item [{part}] to change"
            node = node[part]
            continue
        if not isinstance(node, dict):
            return f"'{format_path(path[:depth])}' is not a mapping"
        if node.get(part) is None:
            node[part] = [] if isinstance(nxt, int) else {}
        node = node[part]
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last > len(node):
            return f"there is no item [{last}] to change"
        old = node[last] if last < len(node) else _UNSET
        if last == len(node):
            node.append(value)
        else:
            node[last] = value
    else:
        if not isinstance(node, dict):
            return f"'{format_path(path[:-1])}' is not a mapping"
        old = node.get(last, _UNSET)
        node[last] = value
    applied.append(AppliedOverride(index, path, old, value))
    return ""
