"""Local dataset files read row by row, each row with the line it came from (standard library; pyarrow
for parquet and arrow, imported only for them).

The trainer reads a local file's rows by these rules, never through ``datasets``' own JSON or CSV
reader: a bad row is then named by its file and line (``data.jsonl:7: parameters.dataset_name: ...``),
whichever of the node's tokenizing processes reads it (they parse JSON Lines line by line with
:func:`json_row`). ``fsdp-tui validate`` reads the first rows by the same rules through
:func:`trainer.wire.data_peek.peek` (no torch, no ``datasets``), so the launcher and the trainer apply one
rule to the same file.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.wire.ckpt_paths import url_scheme
from trainer.wire.config import SettingError

KEY = "parameters.dataset_name"
SUFFIXES = {".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}
"""Local file types by suffix (``datasets``' folders are recognised by their ``dataset_info.json``)."""
_FOLDER_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")


class DataError(SettingError):
    """A problem in the data itself, said in one line: ``FILE:LINE: parameters.dataset_name: what``
    (``FILE: parameters.dataset_name: row N: what`` where rows have no line, as in parquet). Triage
    names these lines ``data``."""

    def __init__(self, source: str, message: str, line: int | None = None, row: int | None = None,
                 key: str = KEY) -> None:
        self.source, self.line, self.row, self.message, self.key = source, line, row, message, key
        where = f"{source}:{line}" if line is not None else source
        what = f"row {row}: {message}" if row is not None and line is None else message
        super().__init__(f"{where}: {key}: {what}")

    def __reduce__(self):
        """Whole through a pickle (a worker process hands its error to the rank)."""
        return DataError, (self.source, self.message, self.line, self.row, self.key)

    def keyed(self, key: str) -> DataError:
        """The same problem named under another key (a mixture's ``parameters.datasets[i].path``)."""
        return DataError(self.source, self.message, self.line, self.row, key)


@dataclass
class Rows:
    """A dataset's rows and where each came from, so that any later problem names its line."""

    items: Any
    """Row dicts: a list, or a ``datasets.Dataset`` (hub names, saved folders)."""
    source: str
    """The file, or the hub name and split."""
    lines: list[int] | None = None
    """The line each row starts on, for text files."""
    first: int = 0
    """The number of rows before these in their source (a part of a larger one): a row is named by its
    place in the source."""

    def __len__(self) -> int:
        return len(self.items)

    def error(self, index: int, message: str) -> DataError:
        """A :class:`DataError` at row ``index`` (0-based)."""
        if self.lines is not None:
            return DataError(self.source, message, line=self.lines[index])
        return DataError(self.source, message, row=self.first + index + 1)


def expand(name: str) -> str:
    """``~`` and ``$VARS`` in a path, as the trainer reads ``output_dir``."""
    return os.path.expanduser(os.path.expandvars(name))


def is_url(name: str) -> bool:
    """Whether ``dataset_name`` is a URL (``s3://bucket/data.jsonl``, read through fsspec); ``file://`` is a path."""
    return url_scheme(name.strip()) is not None


def looks_local(name: str) -> bool:
    """Whether ``dataset_name`` names a file or folder rather than a hub dataset: a path (``/``, ``./``,
    ``~``, ``$VAR``) or a name with a data file's suffix. ``user/dataset`` is a hub name; a URL is neither."""
    stripped = name.strip()
    if is_url(stripped):
        return False
    if stripped.startswith(("/", "./", "../", "~", "$")) or stripped in (".", ".."):
        return True
    return Path(stripped).suffix.lower() in SUFFIXES


def is_saved_folder(path: Path) -> bool:
    return path.is_dir() and any((path / marker).exists() for marker in _FOLDER_MARKERS)


def read_file(path: Path, source: str | None = None) -> Rows:
    """Every row of a local file, with its line; :class:`DataError` for an empty file, bad UTF-8, bad
    JSON or a row that is not a mapping."""
    source = source or str(path)
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DataError(source, f"'{path.suffix or path.name}' is not a data file this trainer reads: "
                        f"use {', '.join(SUFFIXES)} or a folder saved by datasets")
    try:
        if kind in ("parquet", "arrow"):
            rows = Rows(_arrow_rows(path, kind, source), source)
        else:
            rows = text_rows(decode(path.read_bytes(), source), kind, source, limit=None)
    except FileNotFoundError:
        raise DataError(source, "no such file on this node (a local path: it must be here, or on storage "
                        "every node sees)") from None
    except IsADirectoryError:
        raise DataError(source, "this folder was not saved by datasets (no dataset_info.json)") from None
    except PermissionError:
        raise DataError(source, "cannot read the file: permission denied") from None
    if not len(rows):
        raise DataError(source, "the file has no rows")
    return rows


def arrow_schema(path: Path, kind: str):
    """The schema and row count of a parquet or arrow file (from its metadata, or its memory-mapped
    batches: nothing is copied)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "parquet":
        meta = pq.ParquetFile(path).metadata
        return meta.schema.to_arrow_schema(), meta.num_rows
    with pa.memory_map(str(path)) as source:
        try:
            table = pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            table = pa.ipc.open_file(source).read_all()
        return table.schema, table.num_rows


def _arrow_rows(path: Path, kind: str, source: str) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if kind == "parquet":
            return pq.read_table(path).to_pylist()
        with pa.memory_map(str(path)) as mapped:
            try:
                return pa.ipc.open_stream(mapped).read_all().to_pylist()
            except pa.ArrowInvalid:
                return pa.ipc.open_file(mapped).read_all().to_pylist()
    except (pa.ArrowException, OSError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise DataError(source, f"not a readable {kind} file: {str(err).splitlines()[0]}") from None


def cut_tail(data: bytes) -> int:
    """How many bytes at the end of ``data`` belong to a UTF-8 character that goes on past it."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): is its character complete?
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return back if need > back else 0
    return 0


def decode(data: bytes, source: str) -> str:
    """``data`` as text (a byte-order mark dropped), or the :class:`DataError` naming the first byte that is not UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise not_utf8(source, data[err.start], column, line) from None
    return text.removeprefix("\ufeff")


def not_utf8(source: str, byte: int, column: int, line: int) -> DataError:
    """The error for a byte that is not UTF-8 at ``column`` (in bytes, from 1) of ``line``."""
    return DataError(source, f"not UTF-8 text: byte 0x{byte:02x} at column {column} (save the file as UTF-8)",
                     line=line)


def json_row(line: str, source: str, number: int) -> dict[str, Any]:
    """One line of JSON Lines as a row, or the :class:`DataError` that names its line."""
    try:
        row = json.loads(line)
    except ValueError as err:
        raise DataError(source, f"not JSON: {_json_words(err)}", line=number) from None
    return _mapping(row, source, number)


def text_rows(text: str, kind: str, source: str, limit: int | None, partial: bool = False) -> Rows:
    """The rows of a text file's ``text`` (``jsonl``, ``json`` or ``csv``), at most ``limit``; ``partial``: the
    text is the file's start, so a row cut at its end is not an error."""
    if kind == "csv":
        return _csv_rows(text, source, limit, partial)
    start = len(text) - len(text.lstrip())
    if kind == "json" and text[start:start + 1] == "[":
        return _json_array(text, source, start, limit, partial)
    if kind == "json" and text[start:start + 1] == "{":
        whole = _one_document(text, source, start)
        if whole is not None:
            return whole
    return _json_lines(text, source, limit, partial)


def _json_lines(text: str, source: str, limit: int | None, partial: bool) -> Rows:
    rows: list[Any] = []
    lines: list[int] = []
    split = text.split("\n")
    if partial:
        split = split[:-1]  # the last line may be cut
    for number, line in enumerate(split, start=1):
        if not line.strip():
            continue
        rows.append(json_row(line, source, number))
        lines.append(number)
        if limit is not None and len(rows) >= limit:
            break
    return Rows(rows, source, lines)


def _json_array(text: str, source: str, start: int, limit: int | None, partial: bool) -> Rows:
    """``[{...}, {...}]`` element by element, so that each row keeps its line."""
    decoder = json.JSONDecoder()
    rows: list[Any] = []
    lines: list[int] = []
    pos, line, counted = start + 1, 1, 0  # line: the line of text[counted]
    while True:
        pos = _skip_space(text, pos)
        if pos >= len(text):
            if partial:
                break
            raise DataError(source, "not JSON: the list is not closed with ]", line=text.count("\n") + 1)
        if text[pos] == "]" and not rows:
            break
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            row, end = decoder.raw_decode(text, pos)
        except ValueError as err:
            if partial:
                break
            raise DataError(source, f"not JSON: {_json_words(err)}", line=getattr(err, "lineno", line)) from None
        rows.append(_mapping(row, source, line))
        lines.append(line)
        if limit is not None and len(rows) >= limit:
            break
        pos = _skip_space(text, end)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos < len(text) and text[pos] == "]":
            break
        elif pos < len(text) or not partial:
            raise DataError(source, "not JSON: expected ',' or ']' after a row",
                            line=text.count("\n", 0, pos) + 1)
    return Rows(rows, source, lines)


def _one_document(text: str, source: str, start: int) -> Rows | None:
    """A ``.json`` file holding one object: columns (``{"col": [values...]}``) or one list of rows under
    a key (``{"data": [...]}``); ``None`` when it is JSON Lines instead."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":
            return None  # one object per line
        raise DataError(source, f"not JSON: {_json_words(err)}", line=err.lineno) from None
    if isinstance(doc, dict):
        lists = {k: v for k, v in doc.items() if isinstance(v, list)}
        if lists and len(lists) == len(doc) and len({len(v) for v in lists.values()}) == 1 \
                and not all(isinstance(x, dict) for v in lists.values() for x in v):
            count = len(next(iter(lists.values())))
            return Rows([{k: v[i] for k, v in lists.items()} for i in range(count)], source)
        if len(lists) == 1 and all(isinstance(x, dict) for x in next(iter(lists.values()))):
            return Rows(next(iter(lists.values())), source)
    return Rows([_mapping(doc, source, text.count("\n", 0, start) + 1)], source, [text.count("\n", 0, start) + 1])


def _csv_rows(text: str, source: str, limit: int | None, partial: bool) -> Rows:
    reader = csv.reader(io.StringIO(text))
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    try:
        header = next(reader, None)
        if header is None:
            return Rows([], source, [])
        names = [h.strip() for h in header]
        before = reader.line_num
        ended = True
        for cells in reader:
            line, before = before + 1, reader.line_num
            if not any(c.strip() for c in cells):
                continue
            if len(cells) > len(names):
                raise DataError(source, f"{len(cells)} cells for {len(names)} columns (quote cells that hold "
                                "commas)", line=line)
            rows.append({n: (cells[i] if i < len(cells) else None) for i, n in enumerate(names)})
            lines.append(line)
            if limit is not None and len(rows) >= limit:
                ended = False
                break
    except csv.Error as err:
        if not partial:
            raise DataError(source, f"not CSV: {err}", line=reader.line_num) from None
        ended = True
    if partial and ended and rows:  # the last record may be cut where the read stopped
        rows, lines = rows[:-1], lines[:-1]
    return Rows(rows, source, lines)


def _mapping(row: Any, source: str, line: int) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise DataError(source, f"a row must be a JSON object ({{\"column\": value, ...}}), not {type(row).__name__}",
                        line=line)
    return row


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _json_words(err: ValueError) -> str:
    msg = getattr(err, "msg", str(err))
    col = getattr(err, "colno", None)
    return f"{msg} (column {col})" if col else msg
