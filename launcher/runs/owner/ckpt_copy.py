"""A checkpoint's files copied from one machine to another through this one, verified.

Each file is read from the source in chunks (a few read ahead while the previous one is written, so
both connections stay busy), hashed here as it passes, written beside its name at the destination, and
named only when the destination finds the size and SHA-256 the source's bytes had (the agent's
``seal``). A copy that stops half way leaves only hidden ``.part-`` files, which never count.

The hash is also compared with the digest the trainer recorded for the file (``want``, from the
checkpoint's ``meta.json``): bytes that differ from what was written (a disk that flipped them, a file
overwritten since) are never named at the destination, and :class:`BytesDiffer` says which file of
which node.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from launcher.backends.base import CheckpointFiles, DirectCopy, NodeError
from trainer.wire.ckpt_digest import Differs, words

CHUNK = 8 << 20
"""Bytes per request: large enough that a request's round trip is a small part of its time."""
READ_AHEAD = 2
"""Chunks read from the source while earlier ones are being written."""


@dataclass(frozen=True)
class Copied:
    files: int
    bytes: int
    seconds: float
    via: Literal["direct", "launcher"] = "launcher"
    """Straight from node to node, or through this machine's connections."""


class BytesDiffer(NodeError):
    """A file's bytes are not the ones the trainer wrote (its SHA-256 differs from ``meta.json``'s)."""

    def __init__(self, src_label: str, name: str, differs: tuple[Differs, ...]) -> None:
        super().__init__(f"{src_label}: {name}: {words(differs)}", differs[0].node if differs else None)
        self.differs = differs


def _check(sums: Mapping[str, str], want: Mapping[str, str], node_of: Mapping[str, int], src: str,
           name: str) -> None:
    differs = tuple(Differs(f, node_of.get(f, 0)) for f, got in sorted(sums.items()) if f in want and want[f] != got)
    if differs:
        raise BytesDiffer(src, name, differs)


class Endpoint:
    """One side of a copy: a machine's checkpoint files and its checkpoints folder."""

    def __init__(self, files: CheckpointFiles, root: str) -> None:
        self.files, self.root = files, root

    @property
    def label(self) -> str:
        return self.files.label


async def copy_checkpoint(src: Endpoint, dst: Endpoint, name: str, sizes: Mapping[str, int],
                          want: Mapping[str, str] | None = None, node_of: Mapping[str, int] | None = None) -> Copied:
    """``sizes`` (file -> bytes, as the checkpoint's ``meta.json`` or a listing says) from ``src`` to
    ``dst``, each checked and named at the end; ``NodeError`` naming the side that failed,
    :class:`BytesDiffer` when a file's bytes are not the trainer's (``want``: file -> SHA-256;
    ``node_of``: the node that wrote each file, for the words)."""
    start = time.perf_counter()
    sums: dict[str, tuple[int, str]] = {}
    try:
        for file, size in sorted(sizes.items()):
            sums[file] = (size, await _copy_file(src, dst, name, file, size))
        _check({f: s for f, (_, s) in sums.items()}, want or {}, node_of or {}, src.label, name)
        await dst.files.seal(dst.root, name, sums)
    except BaseException:
        try:
            await asyncio.shield(dst.files.unpart(dst.root, name, sorted(sizes)))
        except NodeError:
            pass  # the destination is gone too: its parts never count
        raise
    return Copied(len(sums), sum(sizes.values()), time.perf_counter() - start)


DIRECT_TIMEOUT_S = 120.0
"""How long a direct copy's receiver waits for the sender, and each side for the other's next bytes."""


def can_send_directly(src: Endpoint, dst: Endpoint) -> bool:
    return isinstance(src.files, DirectCopy) and isinstance(dst.files, DirectCopy)


async def copy_direct(src: Endpoint, dst: Endpoint, name: str, sizes: Mapping[str, int], addr: str,
                      want: Mapping[str, str] | None = None, node_of: Mapping[str, int] | None = None) -> Copied:
    """``sizes`` sent from ``src`` straight to ``dst`` (which ``src`` dials at ``addr``), each file named at
    ``dst`` only when both sides saw the same SHA-256. ``NodeError`` saying ``cannot connect ... for a
    direct copy`` when ``src`` cannot dial ``dst`` (the caller copies through here instead)."""
    sender, receiver = src.files, dst.files
    if not isinstance(sender, DirectCopy) or not isinstance(receiver, DirectCopy):
        raise NodeError(f"{src.label}: cannot connect to {dst.label} for a direct copy (one of them is this machine)")
    start = time.perf_counter()
    files = dict(sorted(sizes.items()))
    try:
        port, token = await receiver.listen(dst.root, name, files, DIRECT_TIMEOUT_S)
        sent = await sender.send(src.root, name, files, addr, port, token, DIRECT_TIMEOUT_S)
        got = await receiver.received(token)
        if sent != got or set(sent) != set(files):
            raise NodeError(f"{dst.label}: the copy of {name} from {src.label} arrived other than it was sent")
        _check(sent, want or {}, node_of or {}, src.label, name)
        await dst.files.seal(dst.root, name, {f: (files[f], sent[f]) for f in files})
    except BaseException:
        try:
            await asyncio.shield(dst.files.unpart(dst.root, name, sorted(files)))
        except NodeError:
            pass
        raise
    return Copied(len(files), sum(files.values()), time.perf_counter() - start, via="direct")


async def _copy_file(src: Endpoint, dst: Endpoint, name: str, file: str, size: int) -> str:
    digest = hashlib.sha256()
    chunks: asyncio.Queue = asyncio.Queue(READ_AHEAD)

    async def read_all() -> None:
        for offset in range(0, size, CHUNK):
            want = min(CHUNK, size - offset)
            data = await src.files.read(src.root, name, file, offset, want)
            if len(data) != want:
                raise NodeError(f"{src.label}: {name}/{file} ended at {offset + len(data)} of its {size} B "
                                "(it changed while it was copied)")
            await chunks.put((offset, data))
        await chunks.put(None)

    reader = asyncio.create_task(read_all())
    try:
        if size == 0:
            await dst.files.put(dst.root, name, file, 0, b"")
        while True:
            got = await _next(chunks, reader)
            if got is None:
                break
            offset, data = got
            await asyncio.to_thread(digest.update, data)  # hashlib lets go of the GIL: another core
            await dst.files.put(dst.root, name, file, offset, data)
        await reader
    finally:
        reader.cancel()
    return digest.hexdigest()


async def _next(chunks: asyncio.Queue, reader: asyncio.Task):
    """The next chunk, or the reader's failure as soon as it fails (not a wait on an empty queue)."""
    getting = asyncio.ensure_future(chunks.get())
    done, _ = await asyncio.wait({getting, reader}, return_when=asyncio.FIRST_COMPLETED)
    if getting in done:
        return getting.result()
    getting.cancel()
    reader.result()  # raises the reader's error
    return await chunks.get()  # it ended: what it queued last (None)
