"""Files of a node's run directory: read at an offset (optionally held until there is more), write
atomically, and receive uploads in chunks that are checked by size and hash before they are unpacked.
Names are plain file names of the run directory, never paths out of it."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import stat
import tarfile
import time

from .jobs import alive, read_state

MAX_WAIT_S = 5.0
UPLOAD_PREFIX = ".upload-"


class BadName(ValueError):
    """A name that is not a plain file name of the run directory."""


class NotOwn(ValueError):
    """A file the agent will not read: a symbolic link (to anything, anywhere) or not a regular file."""


def open_own(path: str):
    """``path`` opened for reading only when it is the run's own regular file: a symbolic link is refused,
    not followed (``O_NOFOLLOW``: no moment between a check and the open), and so is anything but a regular
    file (a FIFO would hang the read). Said in one line that names the file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotOwn(f"{path} is a symbolic link: not read (the agent reads the run's own files only, "
                         "never where a link points)") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotOwn(f"{path} is not a regular file: not read")
    return os.fdopen(fd, "rb")


def _plain(name: str) -> str:
    if os.path.basename(name) != name or name in ("", ".", ".."):
        raise BadName(f"not a file name of the run directory: {name!r}")
    return name


def size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def read(node_dir: str, name: str, offset: int, limit: int) -> bytes:
    try:
        with open_own(os.path.join(node_dir, _plain(name))) as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""


def read_waiting(node_dir: str, name: str, offset: int, limit: int, wait_s: float) -> bytes:
    """``read``, held back (a long poll, at most ``MAX_WAIT_S``) until there are bytes past ``offset`` or
    the job has ended: new output reaches the launcher within ~20 ms, not a poll later."""
    deadline = time.monotonic() + min(max(wait_s, 0.0), MAX_WAIT_S)
    path = os.path.join(node_dir, _plain(name))
    while (time.monotonic() < deadline and size(path) <= offset
           and read_state(node_dir).get("state") != "exited"):
        time.sleep(0.02)
    return read(node_dir, name, offset, limit)


def write(node_dir: str, name: str, data: bytes) -> str:
    """Write a file of the run directory atomically (e.g. the run's parameters); returns its path."""
    os.makedirs(node_dir, exist_ok=True)
    path = os.path.join(node_dir, _plain(name))
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        _remove(tmp)
        raise
    return path


def put(node_dir: str, name: str, offset: int, data: bytes) -> int:
    """Write one chunk of an upload at ``offset`` (a retried chunk overwrites itself); returns the size."""
    os.makedirs(node_dir, exist_ok=True)
    path = os.path.join(node_dir, UPLOAD_PREFIX + _plain(name))
    mode = "r+b" if offset and os.path.exists(path) else "wb"
    with open(path, mode) as f:
        f.seek(offset)
        f.write(data)
        f.truncate(offset + len(data))
    return offset + len(data)


def unpack(node_dir: str, name: str, total: int, sha256: str, dest: str) -> int:
    """Check an upload's size and hash, then unpack the tar into ``dest`` (a folder of the run
    directory, replaced whole). Returns the number of files."""
    path = os.path.join(node_dir, UPLOAD_PREFIX + _plain(name))
    got = size(path)
    if got != total:
        raise ValueError(f"upload {name}: {got} of its {total} B arrived")
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != sha256:
        raise ValueError(f"upload {name}: content hash differs from what was sent")
    target = os.path.join(node_dir, *[_plain(p) for p in dest.split("/")])
    staging = f"{target}.{os.getpid()}.unpack"
    shutil.rmtree(staging, ignore_errors=True)
    count = 0
    try:
        with tarfile.open(path, "r") as tar:
            members, refused = checked_members(tar, total)
            if refused:
                shown = ", ".join(repr(r) for r in refused[:5]) + (" ..." if len(refused) > 5 else "")
                raise ValueError(f"upload {name}: refusing {len(refused)} entries that are not plain files or "
                                 f"folders inside it: {shown}; nothing was unpacked")
            extract(tar, members, staging)
            count = sum(m.isfile() for m in members)
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _remove(path)
    return count


def checked_members(tar: tarfile.TarFile, max_bytes: int) -> tuple[list, list[str]]:
    """The rule for every tar from the other side (an upload here, an export's copy on the launcher):
    regular files and folders only (no link, hard link, device or FIFO), relative names that stay inside the
    target, and files adding up to no more than ``max_bytes`` (the tar's own size: a sparse member that
    would grow past it is refused). Returns the members and the names of those refused."""
    members, refused, total = [], [], 0
    for m in tar.getmembers():
        parts = m.name.replace("\\", "/").split("/")
        total += m.size if m.isfile() else 0
        if (m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()) or m.issparse()
                or total > max_bytes):
            refused.append(m.name)
        else:
            members.append(m)
    return members, refused


def extract(tar: tarfile.TarFile, members: list, target: str) -> None:
    """Members passed by :func:`checked_members` into ``target``, with ``filter="data"`` where Python has
    it (it refuses again what would leave the target and drops set-id and device bits)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(target, members=members, filter="data")
    else:  # a Python without the backported filter (before 3.10.12 / 3.11.4)
        tar.extractall(target, members=members)  # members were checked above, by checked_members


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def tar_bytes(root: str, arcname: str, exclude=()) -> bytes:
    """A tar of ``root`` (as ``arcname``) without what ``exclude``'s globs match (an export's folder, packed to
    be copied back); the launcher ships code by :mod:`launcher.workload.snapshot`'s rule instead."""
    import fnmatch

    def skip(info: tarfile.TarInfo):
        base = os.path.basename(info.name)
        return None if any(fnmatch.fnmatch(base, pat) for pat in exclude) else info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(root, arcname=arcname, filter=skip)
    return buf.getvalue()


def remove_run_dir(node_dir: str) -> dict:
    """Remove this node's run directory (code, parameters, outputs under it, its log and this agent's own
    copy), and the run's folder above it once it is empty. Refused while the run's job is alive here.
    Answers what was there: bytes and files, the agent's own zip left out (it came with this request)."""
    state = read_state(node_dir)
    if state.get("state") in ("starting", "running") and alive(state.get("supervisor_pid")):
        raise ValueError(f"the run's job still runs in {node_dir}: cancel the run first")
    total = count = 0
    for root, _dirs, names in os.walk(node_dir):
        for name in names:
            if root == node_dir and name.startswith("agent-") and name.endswith(".zip"):
                continue
            try:
                total += os.lstat(os.path.join(root, name)).st_size
                count += 1
            except OSError:
                pass
    shutil.rmtree(node_dir)
    try:
        os.rmdir(os.path.dirname(node_dir.rstrip("/")))  # the run's folder: empty once every node is gone
    except OSError:
        pass  # another node's directory is still there (a shared home), or it was never ours alone
    return {"path": node_dir, "bytes": total, "files": count}
