"""A run's folder's notes of what was done after it, or beside it: its files removed from the nodes
(``cleaned.json``), its lost nodes swept once they were back (``swept.json``), the checkpoint copies its
owner brought to node 0 to resume from (``brought.json``). Each file is one type here, read through
:func:`~launcher.runs.core.layout.read_json` and written only here (:mod:`launcher.runs.core.layout` holds
the run's own record: its plan, options, metrics and end)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.runs.core.layout import read_json, write_whole

CLEANED = "cleaned.json"
"""In the run's record: when its files were removed from the nodes, and what each node said."""
SWEPT = "swept.json"
"""In the run's folder: per lost node, whether it has been swept, when it was last tried, what was said."""
BROUGHT = "brought.json"
"""In the run's record: the copies its owner brought to node 0 to resume from, removed at the run's end."""


@dataclass(frozen=True)
class Cleaned:
    """The run's files removed from its nodes (``fsdp-tui clean``): when, and what each node said."""

    at: float | None
    said: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "said": list(self.said)}

    @classmethod
    def from_wire(cls, data: object) -> Cleaned | None:
        """``cleaned.json`` decoded: any object says the files were removed (its parts as far as they are
        of their type); ``None`` for what is none."""
        if not isinstance(data, dict):
            return None
        at, said = data.get("at"), data.get("said")
        return cls(float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None,
                   tuple(s for s in said if isinstance(s, str)) if isinstance(said, list) else ())


def save_cleaned(directory: Path, cleaned: Cleaned) -> None:
    write_whole(directory / CLEANED, json.dumps(cleaned.to_dict()))


def read_cleaned(directory: Path) -> Cleaned | None:
    """When the run's files were removed from its nodes, and what each said (``None``: never)."""
    return Cleaned.from_wire(read_json(directory / CLEANED))


@dataclass(frozen=True)
class SweptNode:
    """A lost node's sweep: when it was last tried, whether it answered and was swept, what was said."""

    tried_at: float | None = None
    done: bool = False
    said: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**({"tried_at": self.tried_at} if self.tried_at is not None else {}),
                **({"done": True} if self.done else {}), **({"said": self.said} if self.said else {})}

    @classmethod
    def from_wire(cls, data: object) -> SweptNode:
        if not isinstance(data, dict):
            return cls()
        tried, said = data.get("tried_at"), data.get("said")
        return cls(float(tried) if isinstance(tried, (int, float)) and not isinstance(tried, bool) else None,
                   data.get("done") is True, said if isinstance(said, str) else "")


def read_swept(directory: Path) -> dict[int, SweptNode]:
    """Each lost node's sweep by its rank, in the file's order (none yet: empty)."""
    data = read_json(directory / SWEPT)
    if not isinstance(data, dict):
        return {}
    return {int(rank): SweptNode.from_wire(entry) for rank, entry in data.items()
            if rank.isascii() and rank.isdigit()}


def save_swept(directory: Path, swept: Mapping[int, SweptNode]) -> None:
    """The sweeps, whole or not at all."""
    write_whole(directory / SWEPT, json.dumps({str(rank): node.to_dict() for rank, node in swept.items()}))


@dataclass(frozen=True)
class BroughtCopy:
    """A copy of a checkpoint the run's owner made in node 0's checkpoints folder ``root`` to resume from,
    and the run that wrote the checkpoint (``None``: not known): removed when the run ends, only if it is
    still that checkpoint's copy."""

    root: str
    name: str
    writer: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "name": self.name, "writer": self.writer}

    @classmethod
    def from_wire(cls, data: object) -> BroughtCopy | None:
        if not isinstance(data, dict):
            return None
        root, name, writer = data.get("root"), data.get("name"), data.get("writer")
        if not (isinstance(root, str) and isinstance(name, str) and (writer is None or isinstance(writer, str))):
            return None
        return cls(root, name, writer)


def read_brought(directory: Path) -> list[BroughtCopy]:
    """The copies recorded, oldest first (entries of another shape left out)."""
    data = read_json(directory / BROUGHT)
    found = (BroughtCopy.from_wire(e) for e in (data if isinstance(data, list) else ()))
    return [c for c in found if c is not None]


def save_brought(directory: Path, copies: list[BroughtCopy]) -> None:
    """The copies the run still owes a removal; none: the file goes."""
    if copies:
        write_whole(directory / BROUGHT, json.dumps([c.to_dict() for c in copies]))
    else:
        (directory / BROUGHT).unlink(missing_ok=True)
