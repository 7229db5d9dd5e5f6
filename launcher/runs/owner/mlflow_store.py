"""A local MLflow store (SQLite) opened or made: made whole or not at all, and made from a blank store kept
once per MLflow version instead of running MLflow's migrations again in every new data dir.

MLflow makes a SQLite store by running each of its migrations, one statement at a time (about a second of
CPU, with its imports). Every fresh store of one MLflow version is the same but for its ``Default``
experiment (where its artifacts go, when it was made), so the first one made is kept as a blank
(``~/.cache/fsdp-tui/mlflow/blank-<version>.db``) and each later store is a copy of it with that one row
set. Where the blank cannot be kept or read, the store is made as MLflow makes it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from pathlib import Path


def check_sqlite(path: Path) -> None:
    """Fail at once when a SQLite store cannot be opened: MLflow itself retries for ~100 s first."""
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
            db.execute("PRAGMA user_version").fetchone()
    except sqlite3.Error as err:
        raise RuntimeError(f"cannot open the tracking store {path}: {err}") from None


def made_whole(path: Path, artifacts: Path) -> None:
    """A fresh SQLite store (no file, or the empty one :func:`check_sqlite` leaves) made, its tables and every
    migration, in a file beside it and moved into place whole. MLflow migrates a SQLite store one statement at
    a time: a process killed in the middle (a run's owner stopped while it made the data dir's store) left a
    half-made store every later write failed on ("duplicate column name"). Called with the store's lock held.
    What a killed maker left beside the store (its file, its journal) goes, whole store or not. The store's
    ``Default`` experiment keeps its artifacts under ``artifacts``, as the sink's own experiments do."""
    _clear_leftovers(path)
    if path.exists() and path.stat().st_size > 0:
        return
    new = path.with_name(f".{path.name}.{os.getpid()}.new")
    new.touch(mode=path.stat().st_mode & 0o777 if path.exists() else 0o600)
    blank = blank_store()
    if blank is None or not _copied(blank, new, artifacts):
        _make(new, artifacts)
    os.replace(new, path)


def blank_store() -> Path | None:
    """This MLflow version's blank store, made on first use; ``None`` where it cannot be kept."""
    from mlflow.version import VERSION  # mlflow's or mlflow-skinny's: the one whose migrations make stores

    try:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fsdp-tui" / "mlflow"
        blank = cache / f"blank-{VERSION}.db"
        if blank.is_file() and blank.stat().st_size > 0:
            return blank
        cache.mkdir(parents=True, exist_ok=True)
        _clear_leftovers(blank)
        new = blank.with_name(f".{blank.name}.{os.getpid()}.new")
        new.unlink(missing_ok=True)
        _make(new, cache / "unused-artifacts")
        os.replace(new, blank)  # whole or absent, whoever makes it at the same time
    except Exception:  # a shortcut only: whatever stops it (no home, a full disk, MLflow's own error), the
        return None  # store is made the long way, where that error is said as it concerns the store
    return blank


def _copied(blank: Path, new: Path, artifacts: Path) -> bool:
    """``blank`` copied into ``new`` with its ``Default`` experiment made now, its artifacts under
    ``artifacts``; ``False`` (``new`` emptied) where it could not be. A blank that is not a store (damaged,
    no ``Default`` experiment) goes, for the next store to make it again; a copy that failed for want of
    room or of a file leaves it be."""
    now = int(time.time() * 1000)
    try:
        with open(blank, "rb") as src, open(new, "wb") as dst:
            shutil.copyfileobj(src, dst)
        with contextlib.closing(sqlite3.connect(new)) as db, db:
            done = db.execute("UPDATE experiments SET artifact_location = ?, creation_time = ?, "
                              "last_update_time = ? WHERE experiment_id = 0",
                              ((artifacts / "0").as_uri(), now, now))
            if done.rowcount != 1:
                raise sqlite3.DatabaseError("no Default experiment")
        return True
    except sqlite3.Error:  # copied whole, yet not read as a store: the blank is at fault
        blank.unlink(missing_ok=True)
    except OSError:  # no room or no file for the copy: the blank is not at fault
        pass
    new.write_bytes(b"")
    return False


def _make(path: Path, artifacts: Path) -> None:
    """The store MLflow makes at ``path`` (every migration), its ``Default`` experiment's artifacts under
    ``artifacts``."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    SqlAlchemyStore(f"sqlite:///{path}", artifacts.as_uri()).engine.dispose()


def _clear_leftovers(path: Path) -> None:
    """What makers of ``path`` killed before they finished left beside it (their file, its journal)."""
    for leftover in path.parent.glob(f".{path.name}.*.new*"):
        if not _maker_alive(leftover.name[len(path.name) + 2:].split(".", 1)[0]):
            leftover.unlink(missing_ok=True)


def _maker_alive(pid: str) -> bool:
    """Whether the process that named a store's file beside it still lives (this one is making it anew)."""
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, another user's
        return True
    return True
