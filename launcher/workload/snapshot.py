"""A code snapshot as the nodes will receive it: one walk of ``root_path`` that both checks it up front
(``validate``, ``--dry-run``, the editor, every launch) and writes the tar that ships, to a file on disk.

A node unpacks regular files and folders only (it refuses links, hard links, FIFOs and devices: a tar is
not allowed to write anywhere but its folder). So the walk never follows a link out of the root: a link to
a file inside the root ships as a copy of that file; every other link, a FIFO, a device or socket, and a
second hard link of a file already shipped is refused, each named with what to do, before anything is
uploaded. Nothing is read into memory but one file's block at a time.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import stat
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

LARGE_SNAPSHOT_BYTES = 100 << 20
"""A snapshot past this size (shipped to every node, on every launch) is worth a warning."""
MAX_SCAN_ENTRIES = 50_000
"""The up-front check stops here (the editor checks on every change); the launch still checks everything."""
SHOWN = 10


@dataclass(frozen=True)
class Refused:
    """An entry of the snapshot a node would refuse, and what to do about it."""

    rel: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"'{self.rel}' is {self.what}: {self.fix}"


@dataclass(frozen=True)
class _Entry:
    rel: str
    kind: str
    """``dir``, ``file`` (``source`` is what ships: itself, or the file an in-root link points at) or
    ``refused``."""
    source: str = ""
    size: int = 0
    refused: Refused | None = None


@dataclass(frozen=True)
class SnapshotScan:
    """What the nodes would receive of ``root_path``."""

    refused: tuple[Refused, ...]
    files: int
    total_bytes: int
    largest: tuple[tuple[str, int], ...]
    """The biggest files, biggest first (for the size warning)."""
    complete: bool = True
    """False when the check stopped at ``MAX_SCAN_ENTRIES``."""


def _excluded(name: str, exclude: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, pat) for pat in exclude)


def _wanted(rel: str, include: Sequence[str]) -> bool:
    """``rel`` is one of ``include`` (``code_source.snapshot.include_paths``), inside one, or a folder
    above one; everything is wanted when there is no ``include``."""
    return not include or any(rel == p or rel.startswith(p + "/") or p.startswith(rel + "/") for p in include)


def _entries(root: str, exclude: Sequence[str], include: Sequence[str] = ()) -> Iterator[_Entry]:
    """Every entry under ``root`` (sorted, links never followed) as it would ship."""
    real_root = os.path.realpath(root)
    include = tuple(p.strip().strip("/") for p in include)
    seen: dict[tuple[int, int], str] = {}

    def walk(folder: str, rel_folder: str) -> Iterator[_Entry]:
        try:
            items = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as err:
            yield _Entry(rel_folder or ".", "refused", refused=Refused(
                rel_folder or ".", f"a folder that cannot be read ({err.strerror})", "fix its permissions or exclude it"))
            return
        for item in items:
            if _excluded(item.name, exclude):
                continue
            rel = f"{rel_folder}/{item.name}" if rel_folder else item.name
            if not _wanted(rel, include):
                continue
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since it was listed
            if stat.S_ISDIR(st.st_mode):
                yield _Entry(rel, "dir")
                yield from walk(item.path, rel)
            elif stat.S_ISREG(st.st_mode):
                first = seen.setdefault((st.st_dev, st.st_ino), rel) if st.st_nlink > 1 else rel
                if first != rel:
                    yield _Entry(rel, "refused", refused=Refused(
                        rel, f"a second hard link of '{first}'",
                        "replace it with a copy (cp --remove-destination) or add it to code_source.snapshot.exclude"))
                else:
                    yield _Entry(rel, "file", item.path, st.st_size)
            elif stat.S_ISLNK(st.st_mode):
                yield _link(item.path, rel, real_root)
            else:
                what = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                        else "a device")
                yield _Entry(rel, "refused", refused=Refused(rel, what, f"add '{item.name}' to code_source.snapshot.exclude"))

    yield _Entry("", "dir")
    yield from walk(root, "")


def _link(path: str, rel: str, real_root: str) -> _Entry:
    target = os.path.realpath(path)
    shown = os.readlink(path)
    inside = target == real_root or target.startswith(real_root + os.sep)
    if inside and os.path.isfile(target):
        return _Entry(rel, "file", target, os.stat(target).st_size)  # ships as a copy
    if not os.path.exists(target):
        why, fix = f"a link to nothing (-> {shown})", "remove it or add it to code_source.snapshot.exclude"
    elif not inside:
        why, fix = f"a link out of the snapshot (-> {shown})", "copy what it points at into root_path, or add it to code_source.snapshot.exclude"
    else:
        why, fix = f"a link to a folder (-> {shown})", "replace it with the folder itself, or add it to code_source.snapshot.exclude"
    return _Entry(rel, "refused", refused=Refused(rel, why, fix))


def scan(root: Path | str, exclude: Sequence[str], limit: int = MAX_SCAN_ENTRIES,
         include: Sequence[str] = ()) -> SnapshotScan:
    """The up-front check of a snapshot: what a node would refuse, how many files, how big."""
    refused: list[Refused] = []
    sizes: list[tuple[str, int]] = []
    complete = True
    for n, entry in enumerate(_entries(str(root), exclude, include)):
        if n >= limit:
            complete = False
            break
        if entry.refused is not None:
            refused.append(entry.refused)
        elif entry.kind == "file":
            sizes.append((entry.rel, entry.size))
    largest = tuple(sorted(sizes, key=lambda s: -s[1])[:5])
    return SnapshotScan(tuple(refused), len(sizes), sum(s for _, s in sizes), largest, complete)


class SnapshotRefused(ValueError):
    """The snapshot holds entries a node would refuse (found while writing its tar)."""

    def __init__(self, refused: list[Refused]) -> None:
        super().__init__(describe_refused(refused))
        self.refused = refused


def describe_refused(refused: Sequence[Refused]) -> str:
    more = f"; and {len(refused) - SHOWN} more" if len(refused) > SHOWN else ""
    return "; ".join(str(r) for r in refused[:SHOWN]) + more


def write_tar(root: Path | str, arcname: str, exclude: Sequence[str], out: Path,
              include: Sequence[str] = ()) -> tuple[int, str]:
    """The snapshot's tar, written to ``out`` one block at a time; returns its size and sha256.
    ``SnapshotRefused`` (naming every entry) when a node would refuse any of it: nothing ships then.
    ``include``: only these paths (relative to ``root``) and the folders above them."""
    entries = list(_entries(str(root), exclude, include))
    refused = [e.refused for e in entries if e.refused is not None]
    if refused:
        raise SnapshotRefused(refused)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            name = f"{arcname}/{e.rel}" if e.rel else arcname
            info = tarfile.TarInfo(name)
            st = os.stat(e.source or os.path.join(str(root), e.rel))
            info.mtime, info.mode = int(st.st_mtime), stat.S_IMODE(st.st_mode)
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            with open(e.source, "rb") as f:
                info.size = os.fstat(f.fileno()).st_size
                tar.addfile(info, f)
    digest = hashlib.sha256()
    with open(out, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return out.stat().st_size, digest.hexdigest()
