"""A checkpoint's bytes checked against what the trainer wrote, stdlib only: used by the trainer (its
resume, its export), the launcher (its gathers and copies) and the node agent (shipped beside
``ckpt_layout.py``).

The trainer hashes each file as it writes it (SHA-256, on the writer's thread: off the training path for
an async save) and lists the digests in ``meta.json``: ``shards[file]["sha256"]`` and
``metadata_sha256`` for DCP's ``.metadata``. Sizes say a file is all there; digests say it holds what
was written. Whoever reads a checkpoint's bytes compares them (:func:`verify`, or a copy's own hash
with :func:`expected`); bytes that differ are marked in the folder (:func:`mark`), which makes the
checkpoint not whole for every reader (:func:`trainer.wire.ckpt_layout.judge`), with the file and the
node that wrote it. A checkpoint saved before digests were recorded has none to compare: only its sizes
are checked, as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

from trainer.wire.ckpt_layout import (
    BAD_MARK,
    DCP_META,
    SHA256_HEX,
    parse_meta,
    plain_name,
    read_mark,
    shard_list,
)

BLOCK = 1 << 20
THREADS = 4
"""Files hashed side by side (hashlib lets go of the GIL: one core each)."""


@dataclass(frozen=True)
class Differs:
    """One file whose bytes are not the ones the trainer wrote."""

    file: str
    node: int
    """The node whose ranks wrote it (0 for ``.metadata``)."""
    why: str = "its bytes differ from what the trainer wrote (SHA-256)"

    def words(self, where: str = "") -> str:
        at = f" in {where}" if where else ""
        return f"{self.file}{at} (written on node {self.node}): {self.why}"


def expected(meta_text: str | None) -> dict[str, str]:
    """The SHA-256 of each file the trainer wrote, as ``meta.json`` lists them (``.metadata`` included);
    empty for a checkpoint saved before digests were recorded."""
    meta = parse_meta(meta_text) or {}
    entries = meta.get("shards") if isinstance(meta.get("shards"), dict) else {}
    out = {name: e["sha256"] for name, e in entries.items()
           if plain_name(name) and isinstance(e, dict) and isinstance(e.get("sha256"), str) and SHA256_HEX.fullmatch(e["sha256"])}
    top = meta.get("metadata_sha256")
    if isinstance(top, str) and SHA256_HEX.fullmatch(top):
        out[DCP_META] = top
    return out


def node_of(meta_text: str | None, file: str) -> int:
    """The node whose ranks wrote ``file`` (0 for ``.metadata`` and for a file the list does not name)."""
    for name, _size, node in shard_list(parse_meta(meta_text) or {}) or ():
        if name == file:
            return node
    return 0


def check(meta_text: str | None, file: str, sha256: str) -> Differs | None:
    """A copy's own hash of ``file`` against the trainer's (``None``: the same, or none recorded)."""
    want = expected(meta_text).get(file)
    if want is None or want == sha256:
        return None
    return Differs(file, node_of(meta_text, file))


def sha256_of(read: Callable[[int], bytes]) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: read(BLOCK), b""):
        digest.update(block)
    return digest.hexdigest()


def sha256_file(path: str) -> str:
    """A file's SHA-256, never read through a link."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with open(fd, "rb") as f:
        return sha256_of(f.read)


def verify_with(meta_text: str | None, open_file: Callable[[str], BinaryIO]) -> tuple[Differs, ...]:
    """Every file ``meta.json`` has a digest for, read through ``open_file(name)`` and hashed (side by
    side); what differs. A file that is there but cannot be read differs too (it says why); one that is
    not there is the completeness rule's to judge (a shard not gathered yet), not a difference of bytes."""
    want = expected(meta_text)

    def one(name: str) -> Differs | None:
        try:
            with open_file(name) as f:
                got = sha256_of(f.read)
        except FileNotFoundError:
            return None
        except OSError as err:
            return Differs(name, node_of(meta_text, name), f"it cannot be read: {err.strerror or err}")
        return None if got == want[name] else Differs(name, node_of(meta_text, name))

    if not want:
        return ()
    with ThreadPoolExecutor(min(THREADS, len(want))) as pool:
        found = list(pool.map(one, sorted(want)))
    return tuple(d for d in found if d is not None)


def verify(path: str, meta_text: str | None) -> tuple[Differs, ...]:
    """:func:`verify_with` on a folder of this machine."""
    def open_file(name: str) -> BinaryIO:
        fd = os.open(os.path.join(path, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        return open(fd, "rb")

    return verify_with(meta_text, open_file)


def mark_text(differs: tuple[Differs, ...], before: str | None = None) -> str:
    """The mark's content: the files named before (``before``, a mark already there) and these."""
    named = dict.fromkeys([*read_mark(before), *((d.file, d.node) for d in differs)])
    return json.dumps([list(x) for x in named])


def mark(path: str, differs: tuple[Differs, ...]) -> None:
    """Leave the mark in the folder ``path`` of this machine (written whole: a temporary file renamed)."""
    if not differs:
        return
    target = os.path.join(path, BAD_MARK)
    try:
        with open(target, encoding="utf-8") as f:
            before = f.read(1 << 20)
    except (OSError, UnicodeDecodeError):
        before = None
    tmp = f"{target}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(mark_text(differs, before))
    os.replace(tmp, target)


def words(differs: tuple[Differs, ...], where: str = "") -> str:
    """One line naming what differs (the first three), for a refusal or a gather's record."""
    more = f" and {len(differs) - 3} more" if len(differs) > 3 else ""
    return "; ".join(d.words(where) for d in differs[:3]) + more
