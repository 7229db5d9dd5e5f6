"""The node's cache of tokenized data: one folder per key, built once by one process and read by all.

A key is a hash of everything that decides the tokens (the data's content or its ``datasets``
fingerprint, the tokenizer, the chat template, the format and its fields, ``max_seq_len``, prompt
masking, and the encoding rules' own source). Its folder appears whole or not at all:

- every process that needs a key takes the key's lock (``flock``), finds the folder there or builds
  it into a private temporary folder and renames that into place (atomic), then lets go. The node's
  other ranks, and another run that needs the same key at the same time, wait on the lock and then
  find the folder: one build per node (per cache, when several nodes share one);
- a builder that dies lets go of its lock with its process: the next one to take it removes the
  half-built folder and builds again. A folder is read only once its ``meta.json`` (written last,
  before the rename) is there.

Where: ``parameters.data.cache_dir``, else ``$FSDP_TUI_DATA_CACHE``, else ``~/.cache/fsdp-tui/data``
(on each node).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.wire.config import SettingError
from trainer.wire.data_files import DataError

CACHE_ENV = "FSDP_TUI_DATA_CACHE"
META = "meta.json"
_LOCKS = ".locks"
_FILES = ".files"
_BUILDING = ".build-"
_FAILED = ".failed.json"
_STARTED = time.time()
"""When this process began asking for tokens (this module is imported before any build): a folder another
process finished after it was built for this start (another rank of the node), not found from before."""


def _builder() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def cache_root(setting: str | None) -> Path:
    """Where this node keeps tokenized data."""
    if setting:
        return Path(os.path.expanduser(os.path.expandvars(setting)))
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path.home() / ".cache" / "fsdp-tui" / "data"


def digest(value: Any) -> str:
    """A short stable hash of a JSON-able value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Obtained:
    """A key's finished folder, and whether this process built it (and how long that took)."""

    path: Path
    built: bool
    seconds: float
    meta: dict[str, Any]
    waited: bool = False
    """Another process built it for this start (another rank of the node): this one waited for it, or
    found it finished since this process began."""


_UNWRITABLE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def obtain(root: Path, key: str, build: Callable[[Path], dict[str, Any]], *, source: str | None = None) -> Obtained:
    """:func:`build_or_read`, with a cache that cannot be written (a full disk, a read-only folder) said in
    one line naming the setting that moves it."""
    try:
        return build_or_read(root, key, build, source=source)
    except OSError as err:
        if err.errno not in _UNWRITABLE:
            raise
        raise SettingError(f"parameters.data.cache_dir: cannot write the token cache in {root}: "
                           f"{err.strerror or err} (free space there, or point data.cache_dir or "
                           f"${CACHE_ENV} at a disk that has it)") from None


def build_or_read(root: Path, key: str, build: Callable[[Path], dict[str, Any]], *,
                  source: str | None = None) -> Obtained:
    """The finished folder of ``key`` under ``root``; built here by ``build(folder)`` (which fills the
    folder and returns what ``meta.json`` records) when no process has built it yet. A build that found
    a problem in the data (a :class:`DataError`: the same for everyone who builds this key) is
    remembered: the ranks that waited, and later runs of the same data, say it without building again."""
    final = root / key
    found = read_meta(final)
    if found is not None:
        return Obtained(final, False, 0.0, found, waited=_built_since_start(found))
    _raise_remembered(root, key, source)
    with locked(root, key) as blocked:
        found = read_meta(final)  # built by the one we waited for
        if found is not None:
            return Obtained(final, False, 0.0, found, waited=blocked or _built_since_start(found))
        _raise_remembered(root, key, source)
        for stale in root.glob(f"{_BUILDING}{key}-*"):  # a builder that died: only the lock holder builds
            shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)  # a folder without meta.json is no cache
        work = root / f"{_BUILDING}{key}-{socket.gethostname()}-{os.getpid()}"
        work.mkdir(parents=True)
        started = time.perf_counter()
        try:
            meta = {**build(work), "key": key, "built_at": time.time(),
                    "build_s": round(time.perf_counter() - started, 3), "builder": _builder()}
            write_json(work / META, meta)
            os.rename(work, final)
        except DataError as err:
            shutil.rmtree(work, ignore_errors=True)
            write_json(root / f"{key}{_FAILED}", {"source": err.source, "message": err.message, "line": err.line,
                                                 "row": err.row})
            raise
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return Obtained(final, True, meta["build_s"], meta)


def _built_since_start(meta: dict[str, Any]) -> bool:
    """Finished by another process after this one began: built for this start, not by an earlier run."""
    at = meta.get("built_at")
    return isinstance(at, (int, float)) and at >= _STARTED and meta.get("builder") != _builder()


def _raise_remembered(root: Path, key: str, source: str | None = None) -> None:
    """A problem remembered under ``key``, said again; of ``source`` (the file as this run names it: the
    same bytes elsewhere have the same key) when given."""
    try:
        said = json.loads((root / f"{key}{_FAILED}").read_text())
    except (OSError, ValueError):
        return
    if isinstance(said, dict) and isinstance(said.get("source"), str) and isinstance(said.get("message"), str):
        raise DataError(source or said["source"], said["message"], line=said.get("line"), row=said.get("row"))


@contextmanager
def locked(root: Path, key: str) -> Iterator[bool]:
    """``key``'s lock under ``root``, held until the block ends (or the process does); whether another
    process held it when asked."""
    folder = root / _LOCKS
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{key}.lock", "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            blocked = False
        except BlockingIOError:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            blocked = True
        try:
            yield blocked
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def read_meta(folder: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def write_json(path: Path, value: Any) -> None:
    """``value`` as JSON at ``path``, replaced whole (a reader sees the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1, default=str))
    os.replace(tmp, path)


def file_identity(root: Path, path: Path) -> str:
    """A hash of the file's content, remembered by its size, time and inode so that a later start of an
    unchanged file does not read it again."""
    st = path.stat()
    stamp = [str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino]
    memo = root / _FILES / f"{digest(stamp[0])}.json"
    try:
        known = json.loads(memo.read_text())
        if known.get("stamp") == stamp and isinstance(known.get("content"), str):
            return known["content"]
    except (OSError, ValueError, AttributeError):
        pass
    import xxhash

    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            h.update(chunk)
    content = f"{st.st_size}-{h.hexdigest()}"
    memo.parent.mkdir(parents=True, exist_ok=True)
    write_json(memo, {"stamp": stamp, "content": content})
    return content


def tokenizer_identity(tokenizer: Any) -> str:
    """A hash of what makes the tokenizer's ids: its model, normalisation and special tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        body = backend.to_str()
    else:  # a slow tokenizer: its vocabulary and settings
        body = json.dumps([sorted(tokenizer.get_vocab().items()), getattr(tokenizer, "init_kwargs", {})],
                          default=str)
    special = json.dumps([type(tokenizer).__name__, tokenizer.bos_token_id, tokenizer.eos_token,
                          tokenizer.pad_token_id, getattr(tokenizer, "special_tokens_map", {})],
                         sort_keys=True, default=str)
    return hashlib.sha256((body + special).encode()).hexdigest()[:24]
