"""The run's gathers as its record keeps them (``gathers.jsonl``, one line each, written by the owner's
:class:`~launcher.runs.owner.gather.Gatherer`): a checkpoint made whole (what, from which nodes, bytes,
seconds) or not (why), and the notes between them (a route given up). Written and read only here, each line
a type; ``to_dict`` is the line as written."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.runs.core.layout import GATHERS, read_json_lines


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: object) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Gather:
    """One checkpoint's gather: made whole into ``to`` (``ok``), or not, and why (``error``)."""

    name: str
    step: int | None
    ok: bool
    at: float | None
    to: str
    bytes: int | None = None
    files: int | None = None
    seconds: float | None = None
    from_nodes: tuple[int, ...] | None = None
    via: str | None = None
    """The routes its files took (``direct``, ``through``, joined by ``+``; ``none``: nothing to copy)."""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        line: dict[str, Any] = {"name": self.name, "step": self.step, "ok": self.ok, "at": self.at, "to": self.to}
        if self.ok:
            line.update(bytes=self.bytes, files=self.files, seconds=self.seconds,
                        from_nodes=list(self.from_nodes or ()), via=self.via)
        else:
            line.update(error=self.error)
        return line

    @classmethod
    def from_wire(cls, data: dict) -> Gather | None:
        name, ok = data.get("name"), data.get("ok")
        if not isinstance(name, str) or not isinstance(ok, bool):
            return None
        nodes = data.get("from_nodes")
        error = data.get("error")
        return cls(name, _int(data.get("step")), ok, _num(data.get("at")), str(data.get("to") or "?"),
                   _int(data.get("bytes")), _int(data.get("files")), _num(data.get("seconds")),
                   tuple(n for n in nodes if _int(n) is not None) if isinstance(nodes, list) else None,
                   data.get("via") if isinstance(data.get("via"), str) else None,
                   error if isinstance(error, str) else (None if ok else "?"))


@dataclass(frozen=True)
class GatherNote:
    """A note between the gathers (a route given up, in words)."""

    note: str
    at: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"note": self.note, "at": self.at}


def read_gathers(directory: Path) -> list[Gather | GatherNote]:
    """The run's gathers as recorded (``show``, where a resume finds its checkpoint), oldest first; a line
    that is neither is left out."""
    out: list[Gather | GatherNote] = []
    for entry in read_json_lines(directory / GATHERS):
        if not isinstance(entry, dict):
            continue
        if "name" not in entry and isinstance(entry.get("note"), str):
            out.append(GatherNote(entry["note"], _num(entry.get("at"))))
        elif (found := Gather.from_wire(entry)) is not None:
            out.append(found)
    return out


def whole_steps(entries: Sequence[Gather | GatherNote]) -> list[int]:
    """The steps of the checkpoints the gathers made whole."""
    return [g.step for g in entries if isinstance(g, Gather) and g.ok and g.step is not None]


def append_gather(journal: Path, entry: Gather | GatherNote) -> None:
    """One line more in the gathers' record (``OSError`` when the disk refuses it)."""
    with open(journal, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry.to_dict()) + "\n")
