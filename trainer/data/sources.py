"""Where a source's rows come from, read as little as its cache key needs.

A source (``dataset_name``, or one entry of ``datasets``) becomes a :class:`RawSource`: what decides its
rows (a local file's content, a ``datasets`` fingerprint, a bucket object's tag), its columns, and how
the encoding processes read its rows (``trainer.data.encode``):

- ``lines``: JSON Lines (``.jsonl``, and ``.json`` files that hold one object per line): the processes
  read the file's lines themselves, by byte range, each named by its line;
- ``json``: a ``.json`` array or document, a ``.csv``: read here (row by row, each with its line) and
  handed over as JSON text per row;
- ``table``: parquet and arrow files, folders saved by ``datasets``, hub datasets: rows as ``datasets``
  gives them (parquet and arrow files as pyarrow reads them), named by their number.

Only a build reads everything; a start from the cache reads a file's first row (its format) and hashes it
once (remembered by its size and time).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainer.assets import resolve_dataset
from trainer.data import token_cache
from trainer.wire import formats
from trainer.wire.config import SettingError
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
    read_file,
)

Mode = Literal["lines", "json", "table"]


@dataclass
class RawSource:
    source: str
    """How errors name it: the file, or the hub name and split."""
    identity: dict[str, Any]
    """What decides its rows (part of the cache key)."""
    mode: Mode
    columns: list[str]
    """The first row's keys (text files) or the table's columns: what the format is told from."""
    column_names: bool = False
    """The columns are a table's (a ``datasets`` dataset): a format's missing column is said once."""
    path: Path | None = None
    """The file (``lines``; a parquet or arrow file for ``table``)."""
    rows: Rows | None = None
    """The rows read here (``json``)."""
    dataset: Any = None
    """The ``datasets.Dataset`` (``table`` sources that are not local files)."""
    fetch: Any = field(default=None, repr=False)
    """For a bucket object: ``fetch(folder) -> Path``, its copy made on this node when it is built."""

    def format_of(self, cfg: DataConfig) -> str:
        """The format the workload names, else the one the columns show (a one-line error when none)."""
        if cfg.format != "auto":
            if self.column_names:
                problem = formats.column_problem(self.columns, cfg.format, cfg.chat)
                if problem:  # a whole column missing: said once, not as its first row
                    raise DataError(self.source, f"{problem[0]} ({problem[1]})")
            return cfg.format
        found = formats.detect_format(self.columns, cfg.chat)
        if found is None:
            if self.mode == "lines" and self.path is not None:
                read_file(self.path, self.source)  # a problem of the file itself is said first, as it comes
            message, hint = formats.column_problem(self.columns, "auto", cfg.chat) or ("", "")
            raise DataError(self.source, f"{message} ({hint})")
        return found


def raw_sources(name: str, cfg: DataConfig, root: Path) -> tuple[RawSource, RawSource | None]:
    """(train, eval-or-None) sources: a local file, a folder saved by ``datasets``, a bucket object or a
    hub name. A name that looks like a local path and is not there is an error naming it, never a hub
    lookup."""
    source = resolve_dataset(name)
    if is_url(source):
        return bucket_source(source, root), None
    path = local_path(expand(source))
    if path.is_file():
        return file_source(path, source, root), None
    if is_saved_folder(path):
        import datasets

        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if cfg.split not in loaded:
                raise SettingError(f"{source}: parameters.data.split: no split '{cfg.split}' (it has "
                                   f"{', '.join(loaded)})")
            evaluation = loaded.get(cfg.eval_split) if cfg.eval_split else None
            return (table_source(loaded[cfg.split], f"{source} ({cfg.split})"),
                    table_source(evaluation, f"{source} ({cfg.eval_split})") if evaluation is not None else None)
        return table_source(loaded, source), None
    if path.is_dir():
        raise DataError(source, "this folder was not saved by datasets (no dataset_info.json): name a data file "
                        "in it")
    if looks_local(source):
        read_file(path, source)  # says what is wrong with it: missing, not a data file
    return hub_sources(source, cfg)


def local_path(name: str) -> Path:
    """A relative path is read in the working folder (the run's folder on the node), else in the code
    snapshot (``$CODE_SOURCE_PATH``) where it was shipped with the code."""
    path = Path(name)
    code = os.environ.get("CODE_SOURCE_PATH")
    if not path.is_absolute() and not path.exists() and code and (Path(code) / path).exists():
        return Path(code) / path
    return path


def file_source(path: Path, source: str, root: Path) -> RawSource:
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        read_file(path, source)  # says which files it reads
    identity = {"file": token_cache.file_identity(root, path), "kind": kind}
    if kind in ("parquet", "arrow"):
        return RawSource(source, identity, "table", _table_columns(path, kind, source), path=path)
    if kind == "jsonl" or (kind == "json" and _json_lines(path)):
        first = _first_row(path, source)
        if first is None:
            read_file(path, source)  # the file's own first problem, as a whole read says it
            raise DataError(source, "the file has no rows")
        return RawSource(source, identity, "lines", list(first), path=path)
    rows = read_file(path, source)
    return RawSource(source, identity, "json", list(rows.items[0]) if len(rows) else [], rows=rows)


def table_source(dataset: Any, source: str) -> RawSource:
    return RawSource(source, {"fingerprint": dataset._fingerprint, "rows": len(dataset)}, "table",
                     list(dataset.column_names), column_names=True, dataset=dataset)


def hub_sources(source: str, cfg: DataConfig) -> tuple[RawSource, RawSource | None]:
    import datasets

    def split(name: str) -> RawSource:
        try:
            loaded = datasets.load_dataset(source, data_files=cfg.data_files, split=name)
        except (FileNotFoundError, ValueError, ConnectionError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise DataError(source, f"datasets cannot load split '{name}' of it (a hub name: there is no such "
                            f"local file or folder on this node): {first}") from None
        return table_source(loaded, f"{source} ({name})")

    return split(cfg.split), split(cfg.eval_split) if cfg.eval_split else None


def bucket_source(url: str, root: Path) -> RawSource:
    """An object in a bucket (an fsspec URL): keyed by its tag (or size and time), copied to this node
    when its tokens are built, then read as the local file it is."""
    import fsspec

    kind = SUFFIXES.get(Path(url.split("?")[0]).suffix.lower())
    if kind is None:
        raise DataError(url, f"'{Path(url).suffix or url}' is not a data file this trainer reads: use "
                        f"{', '.join(SUFFIXES)}")
    try:
        fs, bare = fsspec.core.url_to_fs(url)
        info = fs.info(bare)
    except FileNotFoundError:
        raise DataError(url, "no such object in the bucket") from None
    except (OSError, ValueError, ImportError) as err:
        raise DataError(url, f"cannot read it: {str(err).splitlines()[0] if str(err) else type(err).__name__}") \
            from None
    tag = {k: str(info[k]) for k in ("ETag", "etag", "md5Hash", "crc32c", "size", "LastModified", "mtime")
           if k in info}

    def fetch(folder: Path) -> Path:
        local = folder / f"source{Path(bare).suffix}"
        fs.get(bare, str(local))
        return local

    with fs.open(bare, "rb") as f:  # the first row tells the format (parquet/arrow: read whole at build)
        head = f.read(1 << 20) if kind in ("jsonl", "json", "csv") else b""
    columns: list[str] = []
    if head:
        first = next((ln for ln in head.split(b"\n") if ln.strip()), b"")
        try:
            columns = list(json.loads(first)) if kind != "csv" else first.decode().strip().split(",")
        except (ValueError, UnicodeDecodeError, TypeError):
            columns = []
    mode: Mode = "table" if kind in ("parquet", "arrow") else "lines" if kind == "jsonl" else "json"
    return RawSource(url, {"object": url, "tag": tag, "kind": kind}, mode, columns, fetch=fetch)


def _json_lines(path: Path) -> bool:
    """Whether a ``.json`` file holds one object per line (as the whole-file reader decides: a first
    value followed by more text)."""
    decoder = json.JSONDecoder()
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    text = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
    if not text.startswith("{"):
        return False
    try:
        _, end = decoder.raw_decode(text)
    except ValueError:
        return False  # an object longer than the part read: the whole-file reader decides
    return bool(text[end:].strip())


def _first_row(path: Path, source: str) -> dict[str, Any] | None:
    """The first row of a JSON Lines file, or ``None`` when it has none or its first line is bad (the
    whole-file reader then says what is wrong, as it always has)."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
            if number == 1:
                text = text.removeprefix("\ufeff")
            if not text.strip():
                continue
            try:
                return json_row(text, source, number)
            except DataError:
                return None
    return None


def _table_columns(path: Path, kind: str, source: str) -> list[str]:
    from trainer.wire.data_files import arrow_schema

    try:
        schema, rows = arrow_schema(path, kind)
    except Exception as err:  # pyarrow raises its own error types for a damaged file
        raise DataError(source, f"not a readable {kind} file: {str(err).splitlines()[0]}") from None
    if rows == 0:
        raise DataError(source, "the file has no rows")
    return list(schema.names)
