"""A source's rows -> token ids and learned-token masks in Arrow files, and those files read back
memory-mapped.

The build is one ``datasets`` ``map(batched=True, num_proc=N)`` over the source (:mod:`trainer.data.sources`
says how each kind's rows are read): each process reads its rows and encodes them with the trainer's own
per-example rules (:class:`trainer.data.rows.Tokenize`, the fast tokenizer's batch call), so the tokens and
labels are those of a run that tokenizes row by row. Labels are kept as a mask (a label is its token or
-100), with each example's count of learned tokens and of tokens cut at ``max_seq_len``.

A bad row never stops a process: the batch that holds it says which and why, and the build names the
first problem of the source, as a whole-file reader would (text that is not UTF-8 before JSON that does
not parse, before a row the format cannot read; then in the order of the rows).

Read back, every process of the node maps the same files (the page cache holds one copy a node); a
row's tokens are slices of them.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from trainer.data.rows import IGNORE, Tokenize
from trainer.data.sources import RawSource
from trainer.wire.data_files import DataError, Rows, json_row, not_utf8

BATCH_ROWS = 1000
ROWS_PER_PROCESS = 20_000
"""A process more only for each this many rows: starting one costs about a second."""
WRITER_ROWS = 10_000
_DECODE, _PARSE, _ROW = 0, 1, 2
"""The order a whole-file reader finds problems in: bytes, then JSON, then the rows' contents."""


def features():
    import datasets

    return datasets.Features({
        "input_ids": datasets.Sequence(datasets.Value("int32")), "learned": datasets.Sequence(datasets.Value("uint8")),
        "lost": datasets.Value("int32"), "learned_count": datasets.Value("int32"),
        "error": datasets.Value("string"), "error_rank": datasets.Value("int8"),
        "error_line": datasets.Value("int64"), "error_row": datasets.Value("int64"),
    })


def processes(rows: int, setting: int | None) -> int:
    """How many processes encode ``rows`` rows: ``data.num_proc``, else the cores this process may use,
    one per :data:`ROWS_PER_PROCESS` rows."""
    if setting:
        return setting
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, rows // ROWS_PER_PROCESS, 64))


def encode(raw: RawSource, tokenize: Tokenize, work: Path, num_proc: int | None) -> dict[str, Any]:
    """Encode every row of ``raw`` into Arrow files in ``work``; what ``meta.json`` records of them. A bad
    row raises the :class:`DataError` that names it."""
    import datasets

    if raw.fetch is not None:  # a bucket object: a copy on this node, read as the local file it is
        raw.path = raw.fetch(work)
    table, reader = _input(raw, work)
    procs = min(processes(len(table), num_proc), max(1, len(table)))
    encoder = _Encoder(tokenize, reader, raw.source, procs > 1)
    previous = os.environ.get("TOKENIZERS_PARALLELISM")
    if procs > 1:  # each process tokenizes alone: no thread pool per process, and no warning about one
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        done = table.map(encoder, batched=True, batch_size=BATCH_ROWS, with_indices=True,
                         remove_columns=table.column_names, features=features(), num_proc=procs if procs > 1 else None,
                         cache_file_name=str(work / "tokens.arrow"), writer_batch_size=WRITER_ROWS,
                         load_from_cache_file=False, new_fingerprint=work.name[-32:], desc="tokenizing")
    finally:
        if procs > 1:
            if previous is None:
                os.environ.pop("TOKENIZERS_PARALLELISM", None)
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = previous
    files = [Path(f["filename"]).name for f in done.cache_files]
    for leftover in set(p.name for p in work.iterdir()) - set(files):  # the input's copy, a bucket's file
        path = work / leftover
        if path.is_file():
            path.unlink()
    problem = _first_problem(done, raw.source)
    if problem is not None:
        raise problem
    return {"files": files, "source": raw.source, "processes": procs, "input_rows": len(table),
            "format": tokenize.fmt, "max_seq_len": tokenize.max_len, "mask_prompt": tokenize.mask_prompt,
            "datasets": datasets.__version__}


def _input(raw: RawSource, work: Path):
    """The ``datasets.Dataset`` the processes map over, and how a batch of it becomes rows."""
    import datasets

    if raw.mode == "lines":
        assert raw.path is not None
        starts, ends, numbers = line_ranges(raw.path)
        return (datasets.Dataset.from_dict({"start": starts, "end": ends, "line": numbers}),
                _LineReader(str(raw.path)))
    if raw.mode == "json":
        assert raw.rows is not None
        import json

        lines = raw.rows.lines if raw.rows.lines is not None else [-1] * len(raw.rows)
        return (datasets.Dataset.from_dict({"json": [json.dumps(r) for r in raw.rows.items], "line": lines}),
                _JsonReader())
    if raw.dataset is not None:
        return raw.dataset, _TableReader()
    assert raw.path is not None
    return datasets.Dataset.from_file(str(_stream_file(raw.path, work))), _TableReader()


def _stream_file(path: Path, work: Path) -> Path:
    """An arrow stream file of a parquet or arrow file's rows (``datasets`` maps stream files); an
    arrow stream file is its own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix.lower() == ".arrow":
        with pa.memory_map(str(path)) as source:
            try:
                pa.ipc.open_stream(source)
                return path
            except pa.ArrowInvalid:
                batches = pa.ipc.open_file(source)
                schema = batches.schema
                out = work / "input.arrow"
                with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
                    for i in range(batches.num_record_batches):
                        writer.write_batch(batches.get_batch(i))
                return out
    parquet = pq.ParquetFile(path)
    out = work / "input.arrow"
    with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_stream(sink, parquet.schema_arrow) as writer:
        for batch in parquet.iter_batches(batch_size=WRITER_ROWS):
            writer.write_batch(batch)
    return out


def line_ranges(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each line's byte range (without its newline) and number, found in pieces (a file of any size)."""
    size = path.stat().st_size
    if size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    found = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = np.frombuffer(mm, dtype=np.uint8)
        piece = 64 << 20
        for at in range(0, size, piece):
            found.append(np.flatnonzero(view[at:at + piece] == 10) + at)
        del view
    newlines = np.concatenate(found)
    ends = np.append(newlines, size) if not len(newlines) or newlines[-1] != size - 1 else newlines
    starts = np.concatenate([[0], newlines + 1])[: len(ends)]
    return starts.astype(np.int64), ends.astype(np.int64), np.arange(1, len(ends) + 1, dtype=np.int64)


class _LineReader:
    """JSON Lines by byte range; the file mapped once per process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.mm: mmap.mmap | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "mm": None}

    def __call__(self, batch: dict[str, list], indices: list[int], source: str):
        if self.mm is None:
            with open(self.path, "rb") as f:
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else None
        rows, lines, problem = [], [], None
        texts = []
        for start, end, number in zip(batch["start"], batch["end"], batch["line"], strict=True):
            raw = self.mm[start:end] if self.mm is not None else b""
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                return [], [], (_DECODE, not_utf8(source, raw[err.start], err.start + 1, number))
            texts.append((text.removeprefix("\ufeff") if start == 0 else text, number))
        for text, number in texts:
            if not text.strip():
                continue
            try:
                rows.append(json_row(text, source, number))
            except DataError as err:
                problem = problem or (_PARSE, err)
                continue
            lines.append(number)
        return rows, lines, problem


class _JsonReader:
    def __call__(self, batch: dict[str, list], indices: list[int], source: str):
        import json

        lines = batch["line"]
        return [json.loads(t) for t in batch["json"]], (lines if lines and lines[0] != -1 else None), None


class _TableReader:
    def __call__(self, batch: dict[str, list], indices: list[int], source: str):
        keys = list(batch)
        return [dict(zip(keys, values, strict=True)) for values in zip(*batch.values(), strict=True)], None, None


class _Encoder:
    """One batch of rows -> their encoded columns (a table), or one row that says the batch's first problem."""

    def __init__(self, tokenize: Tokenize, reader, source: str, alone: bool) -> None:
        self.tokenize, self.reader, self.source, self.alone = tokenize, reader, source, alone

    def __call__(self, batch: dict[str, list], indices: list[int]):
        import pyarrow as pa

        rows, lines, problem = self.reader(batch, indices, self.source)
        if problem is None:
            try:
                examples = self.tokenize.many(Rows(rows, self.source, lines, first=indices[0] if indices else 0))
            except DataError as err:
                problem = (_ROW, err)
        if problem is not None:
            rank, err = problem
            return pa.table({"input_ids": pa.array([[]], pa.list_(pa.int32())),
                             "learned": pa.array([[]], pa.list_(pa.uint8())), "lost": pa.array([0], pa.int32()),
                             "learned_count": pa.array([0], pa.int32()), "error": pa.array([err.message]),
                             "error_rank": pa.array([rank], pa.int8()), "error_line": pa.array([err.line], pa.int64()),
                             "error_row": pa.array([err.row], pa.int64())})
        lengths = np.fromiter((len(ex.input_ids) for ex in examples), dtype=np.int64, count=len(examples))
        total = int(lengths.sum())
        ids = np.fromiter(chain.from_iterable(ex.input_ids for ex in examples), dtype=np.int64, count=total)
        labels = np.fromiter(chain.from_iterable(ex.labels for ex in examples), dtype=np.int64, count=total)
        learned = labels != IGNORE
        if not np.array_equal(labels[learned], ids[learned]):
            raise AssertionError("an encoding rule made a label other than its token or -100")
        offsets = np.zeros(len(examples) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        firsts = offsets[:-1][lengths > 0]
        counted = learned.copy()
        counted[firsts] = False  # an example's first token is never predicted
        nulls = pa.nulls(len(examples))
        return pa.table({
            "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids.astype(np.int32))),
            "learned": pa.ListArray.from_arrays(pa.array(offsets), pa.array(learned.astype(np.uint8))),
            "lost": pa.array(np.fromiter((ex.lost for ex in examples), np.int32, len(examples))),
            "learned_count": pa.array(np.diff(np.concatenate([[0], np.cumsum(counted)])[offsets]).astype(np.int32)),
            "error": nulls.cast(pa.string()), "error_rank": nulls.cast(pa.int8()),
            "error_line": nulls.cast(pa.int64()), "error_row": nulls.cast(pa.int64()),
        })


def _first_problem(done, source: str) -> DataError | None:
    """The source's first problem, as a whole-file reader finds it (``None``: there is none)."""
    import pyarrow.compute as pc

    table = done.data.table.select(["error", "error_rank", "error_line", "error_row"])
    if table.column("error").null_count == table.num_rows:
        return None
    found = table.filter(pc.is_valid(table.column("error"))).to_pylist()
    worst = min(found, key=lambda e: (e["error_rank"], e["error_line"] if e["error_line"] is not None
                                      else e["error_row"] or 0))
    return DataError(source, worst["error"], line=worst["error_line"], row=worst["error_row"])


def integers(array) -> np.ndarray:
    """An Arrow integer array without nulls as a read-only numpy view of its values (no copy: a memory-mapped
    file stays mapped). pyarrow's own ``to_numpy`` imports pandas where it is installed: 0.14 s of CPU and
    27 MiB in every rank that reads the token cache (BENCHMARKS.md), for nothing it uses."""
    import pyarrow as pa

    if not pa.types.is_integer(array.type) or array.null_count:
        raise ValueError(f"expected integers without nulls, got {array.type} with {array.null_count} null(s)")
    dtype = np.dtype(str(array.type))  # Arrow's integer type names are numpy's: int8 ... uint64
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


@dataclass
class Encoded:
    """A finished folder's examples, memory-mapped: token ids and learned masks by example, and the small
    per-example columns (lengths, tokens cut off, learned tokens) in memory."""

    ids: list[np.ndarray]
    learned: list[np.ndarray]
    offsets: list[np.ndarray]
    """Per file chunk: its flat token ids, masks, and each example's start (one more at the end)."""
    chunk_starts: np.ndarray
    """The first example of each chunk."""
    lengths: np.ndarray
    lost: np.ndarray
    learned_count: np.ndarray
    """Learned tokens after each example's first (what the loss counts of it)."""

    @classmethod
    def load(cls, folder: Path, files: list[str]) -> Encoded:
        import pyarrow as pa

        ids, learned, offsets, starts, lost, counts = [], [], [], [0], [], []
        for name in files:
            table = pa.ipc.open_stream(pa.memory_map(str(folder / name))).read_all()
            for id_chunk, mask_chunk in zip(table.column("input_ids").chunks, table.column("learned").chunks,
                                            strict=True):
                ids.append(integers(id_chunk.values))
                learned.append(integers(mask_chunk.values))
                offsets.append(integers(id_chunk.offsets))
                starts.append(starts[-1] + len(id_chunk))
            lost.extend(integers(chunk) for chunk in table.column("lost").chunks)
            counts.extend(integers(chunk) for chunk in table.column("learned_count").chunks)
        chunk_offsets = [o.astype(np.int64) for o in offsets]
        lengths = np.concatenate([np.diff(o) for o in chunk_offsets]) if chunk_offsets else np.zeros(0, np.int64)
        return cls(ids, learned, offsets, np.array(starts, dtype=np.int64), lengths,
                   np.concatenate(lost) if lost else np.zeros(0, np.int32),
                   np.concatenate(counts) if counts else np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.lengths)

    def example(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Example ``i``'s token ids and learned mask (views of the mapped files)."""
        chunk = int(np.searchsorted(self.chunk_starts, i, side="right")) - 1
        local = i - int(self.chunk_starts[chunk])
        lo, hi = int(self.offsets[chunk][local]), int(self.offsets[chunk][local + 1])
        return self.ids[chunk][lo:hi], self.learned[chunk][lo:hi]
