"""What JSON (and the scalars, lists and mappings of YAML a user writes) can hold, as one type, for both
sides: a value kept or passed on as it came, without a model of its own (a newer trainer's metric keys, a
recorded plan's workload, a sweep variant's values, the doctor probe's reply for ``doctor --json``). Readers
narrow it where they use it."""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
"""Recursive: its lists and mappings hold more of the same (the type checker follows it; at run time it stays
this union, its inner ``"JsonValue"`` unresolved)."""
