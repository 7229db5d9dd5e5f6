"""Streaming: the sources read as they are trained on, tokenized and packed on the fly, with a position
a checkpoint keeps so that a resume, on the same or another world size, trains the exact next rows.

The stream is one sequence of rows, the same on every rank and for every world size: each source is
read in windows of :data:`WINDOW_ROWS` rows, a window's examples tokenized by the trainer's own rules
(:class:`trainer.data.rows.Tokenize`), shuffled by the seed, packed first-fit decreasing (or one a row)
and its rows shuffled again; a mixture takes its sources' rows in their weights' shares, slot by slot
(:mod:`trainer.data.mixture`'s pattern, repeated every :data:`PERIOD` rows). Every rank reads and
tokenizes the whole stream, in a thread of its own ahead of training, and trains on its slice of each
global batch (that is what makes the order independent of the world size).

A position is small: for each source its pass, its window, where that window starts in the source (a
byte offset, a row number, ``datasets``' stream state) and how many of the window's rows were taken;
for the mixture, the rows taken from each source. A resume reads the window again, packs it the same
way and skips what was taken.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from trainer.data.mixture import BLOCK, Mix, slots
from trainer.data.position import DataPosition
from trainer.data.rows import IGNORE, Example, GlobalOrder, Tokenize, pack, pad_rows
from trainer.wire.data_files import DataError

WINDOW_ROWS = 4096
"""Rows of a source read, shuffled and packed together."""
PERIOD = 1024
"""Slots of a mixture's pattern (each source's share holds exactly at every period's end)."""
LOOKAHEAD_ROWS = 4096
"""Rows a rank's reader keeps ready ahead of training (more while a window is being made)."""


def learned_of(row: dict[str, torch.Tensor]) -> int:
    """A row's learned tokens as the loss counts them (none at an example's first position)."""
    return int(((row["labels"][1:] != IGNORE) & (row["position_ids"][1:] != 0)).sum())


class SourceStream:
    """One source's training rows, window by window, pass after pass."""

    def __init__(self, index: int, reader, tokenize: Tokenize, *, packing: bool, max_len: int, pad_id: int,
                 seed: int, shuffle: bool, start: Any, key: str) -> None:
        self.index, self.reader, self.tokenize, self.key = index, reader, tokenize, key
        self.packing, self.max_len, self.pad_id, self.seed, self.shuffle = packing, max_len, pad_id, seed, shuffle
        self.start = start
        """Where training rows start in the source (after the held-out ones)."""
        self.state: list[Any] = [0, 0, start, 0]
        """[pass, window, the window's start in the source, rows of the window taken]."""

    def rows(self) -> Iterator[dict[str, torch.Tensor]]:
        produced_this_pass = self.state[1] > 0 or self.state[3] > 0
        while True:
            number, window, position, taken = self.state
            try:
                rows, after, ended = self._window(number, window, position)
            except DataError as err:  # named by the key that names the source
                raise err.keyed(self.key) from None
            produced_this_pass = produced_this_pass or bool(rows)
            for k in range(taken, len(rows)):
                self.state = [number, window, position, k + 1]
                yield rows[k]
            if ended:
                if not produced_this_pass:
                    raise DataError(self.reader.source, "no rows to train on (every row is held out for "
                                    "evaluation or has nothing to learn)", key=self.key)
                self.state, produced_this_pass = [number + 1, 0, self.start, 0], False
            else:
                self.state = [number, window + 1, after, 0]

    def _window(self, number: int, window: int, position: Any) -> tuple[list[dict[str, torch.Tensor]], Any, bool]:
        piece = self.reader.read(position, WINDOW_ROWS)
        examples = [ex for ex in self.tokenize.many(piece.rows) if any(lab != IGNORE for lab in ex.labels[1:])]
        g = torch.Generator().manual_seed(((self.seed * 1_000_003 + self.index) * 7919 + number) * 104_729 + window)
        if self.shuffle and examples:
            examples = [examples[i] for i in torch.randperm(len(examples), generator=g).tolist()]
        rows = pack(examples, self.max_len, self.pad_id) if self.packing else pad_rows(examples, self.pad_id)
        if self.shuffle and rows:
            rows = [rows[i] for i in torch.randperm(len(rows), generator=g).tolist()]
        return rows, piece.after, piece.ended


def held_out(reader, tokenize: Tokenize, count: int, fraction: float) -> tuple[list[Example], Any, int]:
    """A source's first rows, tokenized (its held-out rows), where training starts, and how many rows
    were held out: ``count``, or ``fraction`` of the source when it has no more than ``count`` rows (so a
    small source keeps rows to train on)."""
    if count <= 0:
        return [], reader.start, 0
    piece = reader.read(reader.start, count)
    if piece.ended:
        count = min(count, max(1, round(len(piece.rows) * fraction))) if len(piece.rows) > 1 else 0
        piece = reader.read(reader.start, count) if count else piece
        if not count:
            return [], reader.start, 0
    examples = tokenize.many(piece.rows) if len(piece.rows) else []
    return examples, piece.after, count


def evaluation_rows(reader, tokenize: Tokenize, count: int) -> list[Example]:
    """Up to ``count`` rows of a source's own evaluation split, tokenized."""
    piece = reader.read(reader.start, count)
    return tokenize.many(piece.rows) if len(piece.rows) else []


class GlobalStream:
    """The rows of every source in the mixture's order, each with the stream's position after it."""

    def __init__(self, sources: list[SourceStream], shares: tuple[float, ...], seed: int, shuffle: bool) -> None:
        self.sources, self.seed, self.shuffle = sources, seed, shuffle
        mix = Mix(tuple(str(i) for i in range(len(sources))), tuple(0 for _ in sources), shares, PERIOD)
        self.pattern = slots(mix, seed)
        self.slot = 0
        self.counts = [0] * len(sources)
        self._period: tuple[int, np.ndarray] | None = None

    def source_of(self, slot: int) -> int:
        period, at = divmod(slot, PERIOD)
        if self._period is None or self._period[0] != period:
            owners = self.pattern.copy()
            if self.shuffle:
                g = torch.Generator().manual_seed(self.seed * 1_000_003 + period)
                for first in range(0, PERIOD, BLOCK):
                    block = owners[first:first + BLOCK]
                    owners[first:first + BLOCK] = block[torch.randperm(len(block), generator=g).numpy()]
            self._period = (period, owners)
        return int(self._period[1][at])

    def position(self) -> dict[str, Any]:
        return {"slot": self.slot, "counts": list(self.counts), "sources": [list(s.state) for s in self.sources]}

    def restore(self, position: dict[str, Any]) -> None:
        self.slot, self.counts = int(position["slot"]), [int(c) for c in position["counts"]]
        for source, state in zip(self.sources, position["sources"], strict=True):
            source.state = list(state)

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], int, dict[str, Any]]]:
        each = [s.rows() for s in self.sources]
        while True:
            i = self.source_of(self.slot)
            row = next(each[i])
            self.slot += 1
            self.counts[i] += 1
            yield row, i, self.position()


CHUNK_ROWS = 64
"""Rows a worker process sends at once."""


def _work(stream: GlobalStream, out, parent: int) -> None:
    """A worker process: the stream's rows, sent in chunks until the rank that started it is gone."""
    import queue

    def watch() -> None:  # the rank killed outright: nothing reads the queue and nothing stops this worker
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="data-stream-parent", daemon=True).start()

    def send(item) -> bool:
        while True:
            try:
                out.put(item, timeout=1.0)
                return True
            except queue.Full:
                if os.getppid() != parent:
                    return False

    chunk: list = []
    try:
        for row, source, position in stream:  # arrays, not tensors: pickled whole, no shared-memory handles
            chunk.append(({k: v.numpy() for k, v in row.items()}, source, position))
            if len(chunk) >= CHUNK_ROWS:
                if not send(("rows", chunk)):
                    return
                chunk = []
    except BaseException as err:  # said by the rank, in one line
        send(("rows", chunk))
        send(("error", err))


class StreamRows:
    """The stream's rows by their number since its start, made ahead of training by a thread of this
    rank's own (or, with ``processes``, a worker process the thread reads from: its tokenizing then never
    holds the training thread's interpreter lock): rows are asked for in order (this rank's, and every
    rank's for the loss's token count and the resume check's hash), and dropped once the step that took
    them is done."""

    def __init__(self, stream: GlobalStream, identity: str, processes: int = 0) -> None:
        self.stream, self.identity, self.processes = stream, identity, processes
        self.rows: dict[int, tuple[dict[str, torch.Tensor], int, dict[str, Any]]] = {}
        self.base, self.frontier, self.low = 0, 0, 0
        self.base_position = stream.position()
        self.lock = threading.Condition()
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.stopped = False
        self.kept: tuple[int, dict[str, Any]] | None = None
        """The position after the last row dropped (a checkpoint asks for it after the drop)."""

    def start(self, rows_done: int = 0, position: dict[str, Any] | None = None) -> None:
        """Begin reading (``position``: where a checkpoint says the stream stood after ``rows_done`` rows)."""
        if self.thread is not None:
            raise RuntimeError("the stream has started already")
        if position is not None:
            self.stream.restore(position)
            self.base_position = position
        self.base = self.frontier = self.low = rows_done
        self.thread = threading.Thread(target=self._produce, name="data-stream", daemon=True)
        self.thread.start()

    def _items(self) -> Iterator[tuple[dict[str, torch.Tensor], int, dict[str, Any]]]:
        if not self.processes:
            yield from self.stream
            return
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        out = context.Queue(maxsize=max(2, LOOKAHEAD_ROWS // CHUNK_ROWS))
        worker = context.Process(target=_work, args=(self.stream, out, os.getpid()), name="data-stream",
                                 daemon=True)
        worker.start()
        try:
            while True:
                kind, value = out.get()
                if kind == "error":
                    raise value
                for row, source, position in value:
                    yield {k: torch.from_numpy(v) for k, v in row.items()}, source, position
        finally:  # stopped, or the rows are no longer wanted: the worker is not left waiting on the queue
            worker.terminate()
            worker.join(timeout=5)

    def _produce(self) -> None:
        try:
            for row, source, position in self._items():
                with self.lock:
                    while self.frontier - self.low >= LOOKAHEAD_ROWS and not self.stopped:
                        self.lock.wait()
                    if self.stopped:
                        return
                    self.rows[self.frontier] = (row, source, position)
                    self.frontier += 1
                    self.lock.notify_all()
        except BaseException as err:  # handed to the training thread, which says it in one line
            with self.lock:
                self.error = err
                self.lock.notify_all()

    def _get(self, index: int) -> tuple[dict[str, torch.Tensor], int, dict[str, Any]]:
        if self.thread is None:
            self.start()
        with self.lock:
            while index >= self.frontier and self.error is None:
                self.lock.wait()
            if index >= self.frontier and self.error is not None:
                raise self.error
            if index < self.low:
                raise IndexError(f"stream row {index} was dropped (rows from {self.low} are kept)")
            return self.rows[index]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self._get(index)[0]

    def learned(self, index: int) -> int:
        return learned_of(self._get(index)[0])

    def position_after(self, rows_done: int) -> dict[str, Any]:
        """The stream's position once ``rows_done`` rows are taken."""
        if rows_done == self.base:
            return self.base_position
        if self.kept is not None and self.kept[0] == rows_done:
            return self.kept[1]
        return self._get(rows_done - 1)[2]

    def release(self, below: int) -> None:
        """Rows before ``below`` are done with."""
        if below > self.low:
            self.kept = (below, self.position_after(below))
        with self.lock:
            for i in range(self.low, min(below, self.frontier)):
                self.rows.pop(i, None)
            self.low = max(self.low, below)
            self.lock.notify_all()

    def fingerprint(self) -> str:
        """What the stream is (its sources and how they are tokenized), for the resume check."""
        return hashlib.sha256(self.identity.encode()).hexdigest()[:16]

    def close(self) -> None:
        with self.lock:
            self.stopped = True
            self.lock.notify_all()


class StreamLearned:
    """Each stream row's learned tokens, by its number (the loss's denominator counts every rank's)."""

    def __init__(self, rows: StreamRows) -> None:
        self.rows = rows

    def __getitem__(self, index: int) -> int:
        return self.rows.learned(index)


class StreamOrder(GlobalOrder):
    """:class:`trainer.data.rows.GlobalOrder` over the stream: global micro-batch ``g`` after a start at
    row ``base`` is rows ``base + g * W * B`` on, rank ``r`` taking its ``B``. Positions count from the
    start (or the resume): a resume on another world size continues at the exact row."""

    def __init__(self, rows: StreamRows, world: int, rank: int, batch: int) -> None:
        self.stream_rows = rows
        self.num_rows, self.world, self.rank, self.batch = 1 << 62, world, rank, batch
        self.seed, self.shuffle = 0, False
        self.per_global = world * batch
        self._cached = None

    def indices(self, epoch: int, global_batch: int) -> list[int]:
        start = self.stream_rows.base + global_batch * self.per_global + self.rank * self.batch
        return list(range(start, start + self.batch))

    def global_indices(self, epoch: int, global_batch: int) -> list[int]:
        start = self.stream_rows.base + global_batch * self.per_global
        return list(range(start, start + self.per_global))

    def rows_done(self, epoch: int, position: int) -> int:
        return self.stream_rows.base + position * self.per_global

    def source_counts(self, epoch: int, position: int) -> list[int] | None:
        if len(self.stream_rows.stream.sources) < 2:
            return None
        return list(self.stream_rows.position_after(self.rows_done(epoch, position))["counts"])

    def fit(self, state: DataPosition) -> None:
        """Continue where a loaded checkpoint's stream stood, on this world size."""
        self.stream_rows.start(state.stream_rows, json.loads(state.stream) if state.stream else None)
        state.epoch, state.position, state.per_global = 0, 0, self.per_global

    def note(self, state: DataPosition) -> None:
        """The stream's position as of ``state`` (what a checkpoint saves), and the rows behind it dropped."""
        done = self.rows_done(state.epoch, state.position)
        state.stream_rows = done
        state.stream = json.dumps(self.stream_rows.position_after(done))
        self.stream_rows.release(done)
