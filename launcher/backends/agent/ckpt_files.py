"""A checkpoint's files on this node, for the launcher's gathers: where ``output_dir`` lands here (and
whether node 0's marker is seen there), the files of one checkpoint, reads of a file by offset, and
writes of a copy that takes its name only once its size and SHA-256 are checked.

Every path is a checkpoints folder this node resolved itself plus plain names: a ``step-*`` folder and
file names without a folder part, so a request can never reach outside a checkpoints folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil

from trainer.wire import ckpt_digest, ckpt_layout
from trainer.wire.ckpt_layout import PART_PREFIX, PLACE_MARKER

_RUNNING: dict[str, tuple[int, hashlib._Hash | None]] = {}
"""Copies being written: path -> (bytes so far, their running SHA-256), so the seal needs no re-read."""


def _root(root: str) -> str:
    if not isinstance(root, str) or not os.path.isabs(root):
        raise ValueError(f"not an absolute checkpoints folder: {root!r}")
    return os.path.normpath(root)


def _folder(root: str, name: str) -> str:
    if not ckpt_layout.plain_name(name) or ckpt_layout.step_of_name(name) is None:
        raise ValueError(f"not a checkpoint name: {name!r}")
    return os.path.join(_root(root), name)


def _file(root: str, name: str, file: str) -> str:
    if not ckpt_layout.plain_name(file) or file.startswith(PART_PREFIX):
        raise ValueError(f"not a checkpoint file name: {file!r}")
    return os.path.join(_folder(root, name), file)


def _token(token: str) -> str:
    if not (isinstance(token, str) and token.isalnum() and 8 <= len(token) <= 64):
        raise ValueError("a place marker's token is 8-64 letters and digits")
    return token


def place_mark(root: str, token: str) -> dict:
    """Write node 0's marker in its checkpoints folder (made if missing: the folders made are returned,
    so the marker's removal leaves nothing behind)."""
    root = _root(root)
    created, probe = [], root
    while not os.path.exists(probe):
        created.append(probe)
        probe = os.path.dirname(probe)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, PLACE_MARKER + _token(token)), "w") as f:
        f.write("fsdp-tui: where does this folder land on the other nodes?\n")
    return {"root": root, "created": created}


def place_look(root: str, token: str) -> dict:
    return {"root": _root(root), "seen": os.path.exists(os.path.join(_root(root), PLACE_MARKER + _token(token)))}


def place_clear(root: str, token: str, created: list) -> dict:
    """The marker gone, and the folders its writing made, when they are still empty."""
    try:
        os.remove(os.path.join(_root(root), PLACE_MARKER + _token(token)))
    except FileNotFoundError:
        pass
    for folder in created:  # deepest first, as they were found
        if isinstance(folder, str) and os.path.isabs(folder):
            try:
                os.rmdir(folder)
            except OSError:
                break
    return {}


def files(root: str, name: str) -> dict:
    """The checkpoint's regular files and sizes, and its ``meta.json`` (``None``: not written)."""
    folder = _folder(root, name)
    return {"files": ckpt_layout.folder_files(folder), "meta": ckpt_layout.read_meta(folder),
            "exists": os.path.isdir(folder)}


def read(root: str, name: str, file: str, offset: int, limit: int) -> bytes:
    with open(_file(root, name, file), "rb") as f:
        f.seek(offset)
        return f.read(limit)


def put(root: str, name: str, file: str, offset: int, data: bytes) -> int:
    """One chunk of a copy into ``.part-<file>`` (the folder made if missing); returns the size so far."""
    target = _file(root, name, file)
    part = os.path.join(os.path.dirname(target), PART_PREFIX + file)
    os.makedirs(os.path.dirname(part), exist_ok=True)
    mode = "r+b" if offset and os.path.exists(part) else "wb"
    with open(part, mode) as f:
        f.seek(offset)
        f.write(data)
        f.truncate(offset + len(data))
    done, digest = _RUNNING.get(part, (0, None))
    if offset == 0:
        digest = hashlib.sha256()
    if digest is not None and done == offset:
        digest.update(data)
        _RUNNING[part] = (offset + len(data), digest)
    else:
        _RUNNING[part] = (-1, None)  # out of order (a retried chunk): the seal reads the file again
    return offset + len(data)


def seal(root: str, name: str, sums: dict) -> dict:
    """Each copied file checked (size and SHA-256 as the sender read it), then renamed to its own name;
    the first that differs fails the seal and every copy of this request is removed."""
    checked = []
    for file, (size, sha256) in sorted(sums.items()):
        target = _file(root, name, file)
        part = os.path.join(os.path.dirname(target), PART_PREFIX + file)
        done, digest = _RUNNING.pop(part, (-1, None))
        got = os.path.getsize(part) if os.path.exists(part) else -1
        if got != size:
            unpart(root, name, list(sums))
            raise ValueError(f"{file}: {got} of its {size} B arrived")
        actual = digest.hexdigest() if digest is not None and done == size else _sha256(part)
        if actual != sha256:
            unpart(root, name, list(sums))
            raise ValueError(f"{file}: the copy's SHA-256 differs from the sender's")
        checked.append((part, target))
    for part, target in checked:
        os.replace(part, target)
    return {"sealed": len(checked)}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpart(root: str, name: str, files: list | None = None) -> dict:
    """Copies that never took their name (a gather that failed) removed: those of ``files`` only (a copy
    under way beside it, from another node, keeps its own), or every one."""
    folder = _folder(root, name)
    removed = 0
    try:
        entries = os.listdir(folder)
    except OSError:
        return {"removed": 0}
    mine = None if files is None else {PART_PREFIX + str(f) for f in files}
    for entry in entries:
        if entry.startswith(PART_PREFIX) and (mine is None or entry in mine):
            path = os.path.join(folder, entry)
            _RUNNING.pop(path, None)
            os.remove(path)
            removed += 1
    return {"removed": removed}


def drop(root: str, name: str, writer: str | None = None) -> dict:
    """A node's part of a checkpoint removed once a whole copy holds it (never a link's target). With
    ``writer``, only when the folder's ``meta.json`` names that run (or there is none: a node's part of a
    split save has none): a folder of the same name written by another run stays, and says so."""
    folder = _folder(root, name)
    if writer is not None and not os.path.islink(folder):
        found = ckpt_layout.written_by(folder)
        if found is not None and found != writer:
            raise ValueError(f"{folder} is run {found}'s, not run {writer}'s: it is left alone")
    if os.path.islink(folder):
        os.unlink(folder)
    elif os.path.isdir(folder):
        shutil.rmtree(folder)
    return {"dropped": folder}


def verify(root: str, name: str) -> dict:
    """The checkpoint's files hashed here against the digests its ``meta.json`` lists; files that differ
    are marked in the folder (it is not whole from then on) and named."""
    folder = _folder(root, name)
    differs = ckpt_digest.verify(folder, ckpt_layout.read_meta(folder))
    ckpt_digest.mark(folder, differs)
    return {"differs": [[d.file, d.node, d.why] for d in differs]}


def mark(root: str, name: str, differs: list) -> dict:
    """Files found to differ elsewhere (a copy's own hash, said by the launcher) marked in this folder."""
    folder = _folder(root, name)
    found = tuple(ckpt_digest.Differs(str(f), int(n)) for f, n in differs if ckpt_layout.plain_name(f))
    ckpt_digest.mark(folder, found)
    return {"marked": len(found)}


def forget(root: str, name: str, names: list) -> dict:
    """Files a failed gather had copied into the checkpoint removed again (never its own files: the
    launcher names only what it copied)."""
    removed = 0
    for file in names:
        try:
            os.remove(_file(root, name, str(file)))
            removed += 1
        except FileNotFoundError:
            pass
    return {"removed": removed}


def room(root: str) -> dict:
    """Bytes free where ``root`` is (or would be made): what a gather checks before it copies."""
    probe = _root(root)
    while not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return {"free": shutil.disk_usage(probe).free}
