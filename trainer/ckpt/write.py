"""What each rank writes into a DCP checkpoint, and the writer that writes it on the rank's GPU.

Replicated state (``no_shard``, the replicas of ``hybrid_shard``, plain tensors such as a replicated
model's weights or Adam's step counters) is the same on every replica. DCP writes one copy of it,
but an async save copies the whole state to host memory on every rank *before* DCP plans who
writes what: with ``no_shard`` each rank would pin its whole model and Adam state (12 bytes a
parameter) only for most of it to be dropped. :func:`writer_share` hands each rank only the tensors it
writes (the replicas split them by size), so a rank stages about 1/replicas of the replicated state.
A checkpoint loads the same whichever rank wrote a tensor.

Each writer also hashes every file as DCP writes it (:class:`HashingFs`, on the thread that writes: DCP's
upload thread for an async save, so off the training path): the digests go into ``meta.json``, and every
later reader checks the bytes against them (:mod:`trainer.wire.ckpt_digest`).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import threading
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemWriter


def on_device(device: torch.device) -> None:
    """Make ``device`` this thread's current GPU (a thread starts on GPU 0, whatever its rank)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


class RankDeviceWriter(FileSystemWriter):
    """DCP's file writer, run on this rank's GPU.

    An async save writes from DCP's upload thread. With one write thread and CUDA available, DCP's
    writer (torch 2.11 to 2.15 alike) copies through ``torch.cuda.current_stream()`` of the thread's
    current device, which in a new thread is GPU 0: every rank with a local rank above 0 would open a
    CUDA context (hundreds of MiB) on GPU 0. This writer sets the rank's device in the thread that
    writes, before DCP's copy loop runs."""

    def __init__(self, path: str, device: torch.device) -> None:
        super().__init__(path)
        self.device = device
        self.fs = HashingFs(self.fs)

    def write_data(self, plan, planner):
        on_device(self.device)
        return super().write_data(plan, planner)


def fsspec_writer(path: str, device: torch.device):
    """DCP's fsspec writer (a bucket URL), run on this rank's GPU as :class:`RankDeviceWriter` is."""
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    class Writer(FsspecWriter):
        def __init__(self, path: str) -> None:
            super().__init__(path)
            self.fs = HashingFs(self.fs)

        def write_data(self, plan, planner):
            on_device(device)
            return super().write_data(plan, planner)

    return Writer(path)


def written_sums(writer) -> dict[str, str]:
    """The SHA-256 of each file ``writer`` wrote, by file name (empty for a writer that did not hash)."""
    fs = getattr(writer, "fs", None)
    return dict(fs.sums) if isinstance(fs, HashingFs) else {}


class HashingFs:
    """DCP's filesystem (local or fsspec) with every file it writes hashed as its bytes pass: ``sums``
    maps each file's name to its SHA-256 (a file written out of order, after a seek, is hashed again from
    the disk once closed). A rename (``.metadata.tmp`` to ``.metadata``) carries the digest along."""

    def __init__(self, fs) -> None:
        self._fs = fs
        self.sums: dict[str, str] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self._fs, name)

    @contextlib.contextmanager
    def create_stream(self, path, mode: str):
        with self._fs.create_stream(path, mode) as stream:
            if "w" not in mode and "a" not in mode:
                yield stream
                return
            hashing = _HashingStream(stream)
            yield hashing
        digest = hashing.hexdigest() if hashing.in_order else self._rehash(path)
        with self._lock:
            self.sums[_base(path)] = digest

    def _rehash(self, path) -> str:
        digest = hashlib.sha256()
        with self._fs.create_stream(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()

    def rename(self, path, new_path) -> None:
        self._fs.rename(path, new_path)
        with self._lock:
            if _base(path) in self.sums:
                self.sums[_base(new_path)] = self.sums.pop(_base(path))


def _base(path) -> str:
    return os.path.basename(str(path).rstrip("/"))


class _HashingStream:
    """A writable stream that hashes what is written through it, in order."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.in_order = True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        return self.raw.write(view)

    def seek(self, *args):
        self.in_order = False  # bytes may be written over: hash the file once it is closed
        return self.raw.seek(*args)

    def hexdigest(self) -> str:
        return self.digest.hexdigest()

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


def writer_share(state: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    """``state`` without the replicated tensors another replica writes (nested dicts; lists and
    non-tensors stay whole). Every replica of a tensor computes the same owner: the tensors are
    taken in name order and each goes to the replica with the fewest bytes so far."""
    loads: dict[tuple, list[int]] = {}
    dropped: set[tuple[str, ...]] = set()
    for path, tensor in sorted(tensor_leaves(state), key=lambda item: item[0]):
        group, count, index = _replicas(tensor, rank, world)
        if count == 1:
            continue
        load = loads.setdefault(group, [0] * count)
        owner = min(range(count), key=load.__getitem__)
        load[owner] += local_bytes(tensor)
        if owner != index:
            dropped.add(path)
    return _without(state, dropped, ())


def local_bytes(tensor: torch.Tensor) -> int:
    """The bytes this rank holds of ``tensor`` (its shard for a DTensor)."""
    from torch.distributed.tensor import DTensor

    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


def tensor_bytes(state: Any) -> int:
    """The bytes of every tensor in a nested state dict (this rank's shards)."""
    return sum(local_bytes(t) for _, t in tensor_leaves(state))


def _replicas(tensor: torch.Tensor, rank: int, world: int) -> tuple[tuple, int, int]:
    """(which replica group, how many replicas, this rank's index among them). A plain tensor is
    replicated on all ranks; a DTensor along the mesh dimensions where it is ``Replicate``."""
    from torch.distributed.tensor import DTensor

    if not isinstance(tensor, DTensor):
        return ("all",), world, rank
    mesh = tensor.device_mesh
    dims = [i for i, p in enumerate(tensor.placements) if p.is_replicate()]
    coordinate = mesh.get_coordinate()
    if not dims or coordinate is None:
        return ("own",), 1, 0
    index = 0
    for i in dims:
        index = index * mesh.size(i) + coordinate[i]
    return ("mesh", tuple(mesh.shape), tuple(dims)), math.prod(mesh.size(i) for i in dims), index


def tensor_leaves(value: Any, path: tuple[str, ...] = ()):
    """Every tensor of a nested state dict with its path of keys."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from tensor_leaves(sub, (*path, str(key)))
    elif isinstance(value, torch.Tensor):
        yield path, value


def _without(value: Any, dropped: set[tuple[str, ...]], path: tuple[str, ...]) -> Any:
    if not isinstance(value, dict):
        return value
    return {key: _without(sub, dropped, (*path, str(key))) for key, sub in value.items()
            if (*path, str(key)) not in dropped}
