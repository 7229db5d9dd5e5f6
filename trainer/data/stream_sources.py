"""A source read from a position, a piece at a time, for streaming: each reader gives the rows from a
position on (with the lines or numbers that name them) and the position after them, a JSON-able value a
checkpoint keeps.

- JSON Lines (a local file or a bucket object): the byte offset of the next line (and its number);
- parquet and arrow (local or in a bucket): the next row's number, read by row group or batch;
- ``.json`` and ``.csv`` files and folders saved by ``datasets``: read whole (they are small enough, or
  already memory-mapped), the next row's number;
- a hub dataset: ``datasets``' own streaming, its ``IterableDataset.state_dict()`` as the position.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.assets import resolve_dataset
from trainer.data.sources import local_path
from trainer.wire.data_config import DataConfig
from trainer.wire.data_files import (
    SUFFIXES,
    DataError,
    Rows,
    expand,
    is_saved_folder,
    is_url,
    json_row,
    looks_local,
    not_utf8,
    read_file,
)


@dataclass
class Piece:
    rows: Rows
    after: Any
    """The position after these rows."""
    ended: bool
    """The source has no rows after these."""


def source_size(name: str) -> int | None:
    """Bytes of a local file or bucket object (``None``: a hub dataset or a folder: not known cheaply)."""
    source = resolve_dataset(name)
    try:
        if is_url(source):
            import fsspec

            fs, bare = fsspec.core.url_to_fs(source)
            return int(fs.info(bare).get("size") or 0)
        path = local_path(expand(source))
        return path.stat().st_size if path.is_file() else None
    except (OSError, ValueError, ImportError):
        return None


def open_reader(name: str, cfg: DataConfig):
    """The reader of a source, by what it is (a one-line error when it cannot be read)."""
    source = resolve_dataset(name)
    if is_url(source):
        kind = SUFFIXES.get(Path(source.split("?")[0]).suffix.lower())
        if kind is None:
            raise DataError(source, f"'{Path(source).suffix or source}' is not a data file this trainer reads")
        return _Lines(source, remote=True) if kind == "jsonl" else _Table(source, kind, remote=True) \
            if kind in ("parquet", "arrow") else _Whole(_remote_rows(source, kind), source)
    path = local_path(expand(source))
    if path.is_file():
        kind = SUFFIXES.get(path.suffix.lower())
        if kind == "jsonl":
            return _Lines(str(path), source=source)
        if kind in ("parquet", "arrow"):
            return _Table(str(path), kind, source=source)
        return _Whole(read_file(path, source), source)
    if is_saved_folder(path):
        import datasets

        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            loaded = loaded[cfg.split]
        return _Whole(Rows(loaded, source), source)
    if looks_local(source):
        read_file(path, source)
    return _Hub(source, cfg)


def _remote_rows(url: str, kind: str) -> Rows:
    import fsspec

    with fsspec.open(url, "rb") as f:
        data = f.read()
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=f".{kind}") as tmp:
        tmp.write(data)
        tmp.flush()
        rows = read_file(Path(tmp.name), url)
    return rows


class _Lines:
    """JSON Lines from a byte offset: each row named by its line."""

    def __init__(self, path: str, remote: bool = False, source: str | None = None) -> None:
        self.path, self.remote, self.source = path, remote, source or path
        self.start: Any = [0, 1]

    def _open(self):
        if self.remote:
            import fsspec

            return fsspec.open(self.path, "rb").open()
        try:
            return open(self.path, "rb")
        except FileNotFoundError:
            raise DataError(self.source, "no such file on this node (a local path: it must be here, or on storage "
                            "every node sees)") from None

    def read(self, position: Any, count: int) -> Piece:
        offset, number = int(position[0]), int(position[1])
        rows, lines = [], []
        with self._open() as f:
            f.seek(offset)
            while len(rows) < count:
                raw = f.readline()
                if not raw:
                    return Piece(Rows(rows, self.source, lines), [offset, number], True)
                line = raw[:-1] if raw.endswith(b"\n") else raw
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise not_utf8(self.source, line[err.start], err.start + 1, number) from None
                if offset == 0:
                    text = text.removeprefix("\ufeff")
                offset += len(raw)
                if text.strip():
                    rows.append(json_row(text, self.source, number))
                    lines.append(number)
                number += 1
            ended = not f.read(1)
        return Piece(Rows(rows, self.source, lines), [offset, number], ended)


class _Table:
    """Parquet or arrow rows from a row number, by row group (parquet) or record batch (arrow)."""

    def __init__(self, path: str, kind: str, remote: bool = False, source: str | None = None) -> None:
        self.path, self.kind, self.remote, self.source = path, kind, remote, source or path
        self.start: Any = 0
        self._table = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_table": None}  # a worker process maps the file again (never a copy of it)

    def _file(self):
        if self.remote:
            import fsspec

            return fsspec.open(self.path, "rb").open()
        return self.path

    def read(self, position: Any, count: int) -> Piece:
        import pyarrow as pa
        import pyarrow.parquet as pq

        at = int(position)
        try:
            if self.kind == "parquet":
                pf = pq.ParquetFile(self._file())
                sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)]
                total = sum(sizes)
                pieces, first, seen = [], None, 0
                for i, size in enumerate(sizes):
                    if seen + size > at and seen < at + count:
                        pieces.append(pf.read_row_group(i))
                        first = seen if first is None else first
                    seen += size
                table = pa.concat_tables(pieces).slice(at - first, count) if pieces else None
            else:
                if self._table is None:
                    source = pa.memory_map(self.path) if not self.remote else pa.BufferReader(
                        self._file().read())
                    try:
                        self._table = pa.ipc.open_stream(source).read_all()
                    except pa.ArrowInvalid:
                        self._table = pa.ipc.open_file(source).read_all()
                total = self._table.num_rows
                table = self._table.slice(at, count)
        except (pa.ArrowException, OSError) as err:
            if isinstance(err, FileNotFoundError):
                raise DataError(self.source, "no such file on this node") from None
            raise DataError(self.source, f"not a readable {self.kind} file: {str(err).splitlines()[0]}") from None
        items = table.to_pylist() if table is not None else []
        after = at + len(items)
        return Piece(Rows(items, self.source, first=at), after, after >= total)


class _Whole:
    """Rows read whole (a small file, a saved folder's memory-mapped dataset), from a row number."""

    def __init__(self, rows: Rows, source: str) -> None:
        self.rows, self.source = rows, source
        self.start: Any = 0

    def read(self, position: Any, count: int) -> Piece:
        at = int(position)
        items = self.rows.items
        part = items[at:at + count]
        if hasattr(items, "column_names"):  # a datasets.Dataset slice is a dict of columns
            keys = list(part)
            part = [dict(zip(keys, values, strict=True)) for values in zip(*part.values(), strict=True)]
        lines = self.rows.lines[at:at + count] if self.rows.lines is not None else None
        after = at + len(part)
        return Piece(Rows(list(part), self.source, lines, first=at), after, after >= len(items))


class _Hub:
    """A hub dataset through ``datasets``' streaming; the position is its ``state_dict``."""

    def __init__(self, source: str, cfg: DataConfig) -> None:
        import datasets

        self.source = source
        try:
            self.dataset = datasets.load_dataset(source, data_files=cfg.data_files, split=cfg.split, streaming=True)
        except (FileNotFoundError, ValueError, ConnectionError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise DataError(source, f"datasets cannot stream split '{cfg.split}' of it: {first}") from None
        self.start: Any = None
        self._number = 0

    def read(self, position: Any, count: int) -> Piece:
        if position is not None:
            self.dataset.load_state_dict(position["state"])
            first = int(position["rows"])
        else:
            self.dataset._starting_state_dict = None  # from its first row (load_state_dict has no "none")
            first = 0
        rows = []
        for row in self.dataset:
            rows.append(dict(row))
            if len(rows) >= count:
                break
        after = {"state": self.dataset.state_dict(), "rows": first + len(rows)}
        return Piece(Rows(rows, self.source, first=first), after, len(rows) < count)
