"""What ``fsdp-tui validate`` learns of a local dataset from its first rows, cheaply and with no torch or
``datasets``: its kind, columns and first rows (the first MiB of a text file, read by the trainer's own rules
of :mod:`trainer.wire.data_files`; a parquet or arrow file's schema; a saved folder's features), or why its
rows cannot be read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainer.wire.data_files import SUFFIXES, DataError, cut_tail, decode, text_rows

PEEK_ROWS = 20
PEEK_BYTES = 1 << 20
"""What ``validate`` reads of a file: its first rows, within its first MiB."""


@dataclass(frozen=True)
class Peek:
    """What ``validate`` learns of a local dataset from its first rows."""

    kind: str
    """``jsonl``, ``json``, ``csv``, ``parquet``, ``arrow`` or ``folder``."""
    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...] = ()
    lines: tuple[int, ...] | None = None
    """The line each of ``rows`` starts on (text files)."""
    problem: str | None = None
    """Why its rows cannot be read (bad UTF-8, not JSON, empty), with the line where there is one."""
    notes: tuple[str, ...] = field(default=())


def peek(path: Path) -> Peek:
    """The kind, columns and first rows of a local file or saved folder, cheaply (the first MiB, or the
    parquet/arrow schema). Cached by the file's size and time, for the editor's validation per keystroke."""
    try:
        st = path.stat()
    except OSError:
        return Peek("missing", ())
    return _peek(str(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=32)
def _peek(name: str, _size: int, _mtime_ns: int) -> Peek:
    path = Path(name)
    if path.is_dir():
        return _peek_folder(path)
    kind = SUFFIXES.get(path.suffix.lower(), "")
    if not kind:
        return Peek("", (), problem=f"'{path.suffix or path.name}' is not a data file the trainer reads "
                    f"(use {', '.join(SUFFIXES)} or a folder saved by datasets)")
    if kind in ("parquet", "arrow"):
        return _peek_arrow(path, kind)
    try:
        with open(path, "rb") as f:
            head = f.read(PEEK_BYTES)
            whole = not f.read(1)
        if not whole:  # a character cut in two at the end is not bad UTF-8
            head = head[: len(head) - cut_tail(head)]
        text = decode(head, name)
    except DataError as err:
        return Peek(kind, (), problem=f"line {err.line}: {err.message}")
    except OSError as err:
        return Peek(kind, (), problem=f"cannot read it: {err.strerror}")
    try:
        rows = text_rows(text, kind, name, limit=PEEK_ROWS, partial=not whole)
    except DataError as err:
        if not whole and kind == "json":
            return Peek(kind, ())  # one large object cut at the first MiB: its columns are checked at run time
        return Peek(kind, (), problem=err.message if err.line is None else f"line {err.line}: {err.message}")
    if not len(rows):  # a first row longer than the part read says nothing about the file
        return Peek(kind, (), problem="the file has no rows" if whole else None)
    columns: dict[str, None] = {}
    for item in rows.items:
        columns.update(dict.fromkeys(item))
    return Peek(kind, tuple(columns), tuple(rows.items), tuple(rows.lines) if rows.lines is not None else None)


def _peek_folder(path: Path) -> Peek:
    info = path / "dataset_info.json"
    if not info.exists() and (path / "dataset_dict.json").exists():
        try:
            splits = json.loads((path / "dataset_dict.json").read_text()).get("splits") or []
        except (OSError, ValueError, AttributeError):
            splits = []
        info = next((path / s / "dataset_info.json" for s in splits if (path / s / "dataset_info.json").exists()),
                    info)
    if not info.exists():
        return Peek("folder", (), problem="this folder was not saved by datasets (no dataset_info.json)")
    try:
        features = json.loads(info.read_text()).get("features") or {}
    except (OSError, ValueError, AttributeError):
        return Peek("folder", ())
    return Peek("folder", tuple(features) if isinstance(features, dict) else ())


def _peek_arrow(path: Path, kind: str) -> Peek:
    try:
        import pyarrow  # noqa: F401  (not every operator's machine has it: then only the file's existence)
    except ImportError:
        return Peek(kind, (), notes=("pyarrow is not installed here: its columns are checked at run time",))
    try:
        schema = _arrow_schema(path, kind)
    except Exception as err:  # pyarrow raises its own error types for a damaged file
        return Peek(kind, (), problem=f"not a readable {kind} file: {str(err).splitlines()[0]}")
    return Peek(kind, tuple(schema.names))


def _arrow_schema(path: Path, kind: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "parquet":
        return pq.read_schema(path)
    with pa.memory_map(str(path)) as source:
        try:
            return pa.ipc.open_stream(source).schema
        except pa.ArrowInvalid:
            return pa.ipc.open_file(source).schema
