"""Rules every value of a workload keeps, wherever it was written (the file, ``--set``, the editor, a
sweep's variant) and whatever its key: what the schema's own ranges cannot say for free-form sections
(``parameters`` of a script, ``env_variables``) and what a launch would otherwise meet too late (a number
SQLite, JSON or torch cannot hold, a NUL byte no environment or command line can carry, a key that spans
lines)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""Whole numbers a run's record, its plan and a node's torch can hold (a signed 64-bit integer)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
BLANK = re.compile(r"<[a-z][a-z0-9_-]*>")
"""A template's blank (``<host-0>``, ``<partition>``): a value still to write."""

Path = tuple[str | int, ...]


def value_problems(data: Any, path: Path = ()) -> Iterator[tuple[Path, str, str]]:
    """``(path, message, hint)`` for every value or key of ``data`` that breaks a rule. ``data`` was built
    by the loader within its budget, so walking it is bounded too."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and (bad := _CONTROL.search(key)):
                yield ((*path, key), f"the key holds a control character ({bad.group()!r})",
                       "keys are names on one line: letters, digits, '_', '-' and '.'")
                continue
            yield from value_problems(value, (*path, key))
    elif isinstance(data, list):
        for i, item in enumerate(data):
            yield from value_problems(item, (*path, i))
    elif isinstance(data, bool):
        return
    elif isinstance(data, int):
        if not INT_MIN <= data <= INT_MAX:
            yield (path, "the number is out of range",
                   "whole numbers go from -2**63 to 2**63 - 1 (9223372036854775807)")
    elif isinstance(data, float):
        if not math.isfinite(data):
            yield (path, f"the number must be finite, got {data}", "write a number, not .inf or .nan")
    elif isinstance(data, str) and BLANK.fullmatch(data.strip()):
        yield (path, f"'{data.strip()}' is a blank of the template: write the value here",
               "f8 goes to each blank and selects it: type to replace it")
    elif isinstance(data, str) and "\x00" in data:
        yield (path, f"the value holds a NUL byte (at position {data.index(chr(0)) + 1})",
               "no command line, environment or file name can carry one: remove it")
