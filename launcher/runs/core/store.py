"""The run store: one SQLite database (WAL) in the data dir, safe for a launcher and readers at once."""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from launcher.events import NodeState, RunState
from launcher.paths import private_dir, private_file, run_dir
from launcher.words import plural

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, experiment TEXT NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL,
    num_nodes INTEGER NOT NULL, hosts TEXT NOT NULL, started_at REAL, ended_at REAL, last_loss REAL,
    best_eval_loss REAL, step INTEGER, max_steps INTEGER, workload_path TEXT, output_dir TEXT,
    launcher_pid INTEGER, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS transitions (
    run_id TEXT NOT NULL, at REAL NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL, detail TEXT);
CREATE TABLE IF NOT EXISTS nodes (
    run_id TEXT NOT NULL, node_rank INTEGER NOT NULL, host TEXT NOT NULL, node_dir TEXT NOT NULL,
    state TEXT NOT NULL, exit_code INTEGER, detail TEXT, PRIMARY KEY (run_id, node_rank));
CREATE TABLE IF NOT EXISTS offsets (
    run_id TEXT NOT NULL, node_rank INTEGER NOT NULL, stream TEXT NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY (run_id, node_rank, stream));
"""
_TABLES = ("runs", "transitions", "nodes", "offsets")
_NO_ROOM = ("disk i/o error", "disk is full", "readonly", "read-only", "unable to open")


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    experiment: str
    state: RunState
    attempt: int
    num_nodes: int
    hosts: tuple[str, ...]
    started_at: float | None
    ended_at: float | None
    last_loss: float | None
    best_eval_loss: float | None
    step: int | None
    max_steps: int | None
    workload_path: str | None
    output_dir: str | None = None
    detail: str = ""
    """What the run's last state change said (for a failed run: why)."""

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.ended_at or time.time()) - self.started_at


@dataclass(frozen=True)
class NodeRecord:
    node_rank: int
    host: str
    node_dir: str
    state: NodeState
    exit_code: int | None
    detail: str


@dataclass(frozen=True)
class RunRecord:
    summary: RunSummary
    transitions: list[tuple[float, RunState, int, str]]
    nodes: list[NodeRecord]
    directory: Path
    launcher_pid: int | None = None
    offsets: dict[tuple[int, str], int] = field(default_factory=dict)


class StoreDamaged(Exception):
    """``runs.db`` cannot be read as a database (truncated, overwritten, a corrupt page, or not ours).
    Nothing of the runs is lost with it: each run's folder holds its record, and the store is an index of
    those folders that ``fsdp-tui repair`` rebuilds. ``str()`` is the paragraph a user sees."""

    def __init__(self, path: Path, error: BaseException) -> None:
        self.path, self.error = path, error
        runs = path.parent / "runs"
        super().__init__(
            f"the run store {path} is damaged (SQLite says: {error}). Your runs are not lost: each one's "
            f"workload, plan, events, logs and metrics are in {runs}/<run id>/. Run `fsdp-tui repair` to move "
            f"the damaged file aside and rebuild the store from those folders.")


_F = TypeVar("_F", bound=Callable[..., Any])


def _guarded(method: _F) -> _F:
    """SQLite's "malformed" and "not a database" (``DatabaseError`` but not ``OperationalError``, which is
    a locked or full disk) become :class:`StoreDamaged`, naming the file and the way out."""

    @functools.wraps(method)
    def wrapper(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as err:
            raise StoreDamaged(self.path, err) from None

    return wrapper  # type: ignore[return-value]


def _refuse_foreign(db: sqlite3.Connection) -> None:
    """Another program's database is never written into (not even switched to WAL)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if tables - set(_TABLES):
        db.close()
        raise sqlite3.DatabaseError(f"file is not a run store (it holds tables {sorted(tables)})")


def _use_wal(db: sqlite3.Connection) -> None:
    """WAL mode, which persists in the file. Switching needs the file to itself, and SQLite says "locked"
    at once (no busy wait) while another connection opens it: a fresh data dir opened by two threads or
    processes at the same moment. So: only when not yet WAL, and retried for a while."""
    for attempt in range(100):
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                return
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or attempt == 99:
                raise
            time.sleep(0.05)


class RunStore:
    """The index of the runs in ``home/runs/``: summaries, state changes and node states, queried fast.
    Each run's folder is the truth (:mod:`launcher.runs.core.rebuild` makes the index again from them).
    Opening writes nothing unless the schema is missing, so reading commands work on a full disk."""

    @_guarded
    def __init__(self, home: Path) -> None:
        self.home = private_dir(Path(home))
        self.path = private_file(self.home / "runs.db")
        self._local = threading.local()
        with self._db() as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION or tables != set(_TABLES):
                db.executescript(_SCHEMA)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _db(self) -> sqlite3.Connection:
        """This thread's connection, opened once (a launch writes node states and offsets often);
        autocommit, so every statement is durable on its own."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA busy_timeout=30000")
            try:
                _refuse_foreign(db)
                _use_wal(db)
            except sqlite3.OperationalError as err:
                if not self.path.exists() or not any(w in str(err).lower() for w in _NO_ROOM):
                    raise
                db.close()
                db = self._read_only()
                _refuse_foreign(db)
            self._local.db = db
        return db

    @contextlib.contextmanager
    def _transaction(self, begin: str = "BEGIN IMMEDIATE"):
        """Several statements as one: a reader sees all of them or none (the connection autocommits
        each statement otherwise)."""
        db = self._db()
        db.execute(begin)
        try:
            yield db
        except BaseException:
            if db.in_transaction:  # a full disk may have rolled it back already
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _read_only(self) -> sqlite3.Connection:
        """The store as it is on disk, for reading, when WAL's shared-memory file cannot be made (a full
        or read-only disk, no writer attached): listing runs needs no room. Writes through it fail as
        "readonly", which the recorder keeps for later like any refused write."""
        uri = f"file:{urllib.parse.quote(str(self.path))}?immutable=1"
        return sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)

    @_guarded
    def create_run(self, plan, workload_path: Path | None, resolved_yaml: str) -> Path:
        directory = private_dir(run_dir(self.home, plan.run_id))
        (directory / "nodes").mkdir(mode=0o700, exist_ok=True)
        (directory / "workload.yaml").write_text(resolved_yaml)
        params = plan.workload.parameters
        with self._transaction() as db:  # never a run without its nodes
            db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", (
                plan.run_id, plan.workload.experiment_name, RunState.PENDING.value, 1, len(plan.nodes),
                json.dumps([n.host_display for n in plan.nodes]), None, None, None, None, None,
                params.get("max_steps"), str(workload_path) if workload_path else None,
                params.get("output_dir"), None, time.time()))
            for n in plan.nodes:
                db.execute("INSERT INTO nodes VALUES (?,?,?,?,?,?,?)", (
                    plan.run_id, n.node_rank, n.host_display, n.node_dir, NodeState.PENDING.value, None, ""))
        return directory

    @_guarded
    def restore_run(self, summary: RunSummary, transitions: list[tuple[float, RunState, int, str]],
                    nodes: list[NodeRecord], created_at: float) -> None:
        """A run's index rows as read back from its folder (:mod:`launcher.runs.core.rebuild`), in one
        transaction: a run is indexed whole or not at all."""
        s = summary
        with self._transaction("BEGIN") as db:
            db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", (
                s.run_id, s.experiment, s.state.value, s.attempt, s.num_nodes, json.dumps(list(s.hosts)),
                s.started_at, s.ended_at, s.last_loss, s.best_eval_loss, s.step, s.max_steps, s.workload_path,
                s.output_dir, None, created_at))
            db.executemany("INSERT INTO transitions VALUES (?,?,?,?,?)",
                           [(s.run_id, at, state.value, attempt, detail) for at, state, attempt, detail in transitions])
            db.executemany("INSERT INTO nodes VALUES (?,?,?,?,?,?,?)", [
                (s.run_id, n.node_rank, n.host, n.node_dir, n.state.value, n.exit_code, n.detail) for n in nodes])

    @_guarded
    def set_state(self, run_id: str, state: RunState, attempt: int, detail: str = "",
                  at: float | None = None) -> None:
        """``at``: when it happened (the time its event in the run's folder says too).

        One transaction: a reader never sees a final state without its ``ended_at`` (the connection
        autocommits each statement otherwise)."""
        now = time.time() if at is None else at
        with self._transaction() as db:
            db.execute("INSERT INTO transitions VALUES (?,?,?,?,?)", (run_id, now, state.value, attempt, detail))
            db.execute("UPDATE runs SET state=?, attempt=?, "
                       "started_at=CASE WHEN ? THEN COALESCE(started_at, ?) ELSE started_at END, "
                       "ended_at=CASE WHEN ? THEN ? ELSE ended_at END WHERE run_id=?",
                       (state.value, attempt, state == RunState.RUNNING, now, state.is_final, now, run_id))

    @_guarded
    def set_launcher(self, run_id: str, pid: int | None) -> None:
        with self._db() as db:
            db.execute("UPDATE runs SET launcher_pid=? WHERE run_id=?", (pid, run_id))

    @_guarded
    def set_node(self, run_id: str, node_rank: int, state: NodeState, exit_code: int | None = None,
                 detail: str = "") -> None:
        with self._db() as db:
            db.execute("UPDATE nodes SET state=?, exit_code=?, detail=? WHERE run_id=? AND node_rank=?",
                       (state.value, exit_code, detail, run_id, node_rank))

    @_guarded
    def set_nodes(self, run_id: str, nodes: list[tuple[int, str, str]]) -> None:
        """The run's nodes after its owner replaced one (``(rank, host, node_dir)`` each): one transaction,
        so a reader sees the old node set or the new one."""
        with self._transaction() as db:
            db.execute("DELETE FROM nodes WHERE run_id=?", (run_id,))
            db.executemany("INSERT INTO nodes VALUES (?,?,?,?,?,?,?)",
                           [(run_id, rank, host, node_dir, NodeState.PENDING.value, None, "")
                            for rank, host, node_dir in nodes])
            db.execute("UPDATE runs SET num_nodes=?, hosts=? WHERE run_id=?",
                       (len(nodes), json.dumps([host for _, host, _ in nodes]), run_id))

    @_guarded
    def save_offset(self, run_id: str, node_rank: int, stream: str, offset: int) -> None:
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO offsets VALUES (?,?,?,?)", (run_id, node_rank, stream, offset))

    @_guarded
    def record_metric_summary(self, run_id: str, *, last_loss: float | None = None,
                              best_eval_loss: float | None = None, step: int | None = None,
                              max_steps: int | None = None) -> None:
        with self._db() as db:
            db.execute("UPDATE runs SET last_loss=COALESCE(?, last_loss), step=COALESCE(?, step), "
                       "max_steps=COALESCE(?, max_steps), best_eval_loss=CASE WHEN ? IS NULL THEN best_eval_loss "
                       "WHEN best_eval_loss IS NULL OR ? < best_eval_loss THEN ? ELSE best_eval_loss END "
                       "WHERE run_id=?", (last_loss, step, max_steps, best_eval_loss, best_eval_loss,
                                          best_eval_loss, run_id))

    @_guarded
    def list_runs(self, *, state: str | None = None, experiment: str | None = None,
                  limit: int | None = None) -> list[RunSummary]:
        """Newest first; ``state`` and ``experiment`` filter exactly, ``limit`` keeps the newest N."""
        where, args = [], []
        if state:
            where.append("state = ?")
            args.append(state)
        if experiment:
            where.append("experiment = ?")
            args.append(experiment)
        sql = (f"SELECT runs.*, {_LAST_DETAIL} FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY created_at DESC" + (" LIMIT ?" if limit else ""))
        with self._db() as db:
            rows = db.execute(sql, (*args, *([limit] if limit else []))).fetchall()
        return [_summary(r) for r in rows]

    def active_runs(self) -> list[str]:
        return [r.run_id for r in self.list_runs() if not r.state.is_final]

    @_guarded
    def get_run(self, run_id: str) -> RunRecord | None:
        with self._db() as db:
            row = db.execute(f"SELECT runs.*, {_LAST_DETAIL} FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                return None
            trans = db.execute("SELECT at, state, attempt, detail FROM transitions WHERE run_id=? ORDER BY at",
                               (run_id,)).fetchall()
            nodes = db.execute("SELECT node_rank, host, node_dir, state, exit_code, detail FROM nodes "
                               "WHERE run_id=? ORDER BY node_rank", (run_id,)).fetchall()
            offs = db.execute("SELECT node_rank, stream, offset FROM offsets WHERE run_id=?", (run_id,)).fetchall()
        return RunRecord(
            summary=_summary(row),
            transitions=[(t[0], RunState(t[1]), t[2], t[3] or "") for t in trans],
            nodes=[NodeRecord(n[0], n[1], n[2], NodeState(n[3]), n[4], n[5] or "") for n in nodes],
            directory=run_dir(self.home, run_id),
            launcher_pid=row[14],
            offsets={(o[0], o[1]): o[2] for o in offs},
        )

    @_guarded
    def find(self, prefix: str) -> str:
        """The run whose id starts with ``prefix`` (like git), or ends with it (the short id the app
        shows); ``LookupError`` says why not."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self._db() as db:
            rows = db.execute("SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\\'", (escaped + "%",)).fetchall()
            if not rows:
                rows = db.execute("SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\\'",
                                  ("%-" + escaped,)).fetchall()
        exact = [r[0] for r in rows if r[0] == prefix]
        if exact:
            return exact[0]
        if not rows:
            raise LookupError(f"no run '{prefix}' (see fsdp-tui runs)")
        if len(rows) > 1:
            raise LookupError(f"'{prefix}' matches {plural(len(rows), 'run')}: {', '.join(r[0] for r in rows[:5])}")
        return rows[0][0]

    @_guarded
    def delete_run(self, run_id: str) -> None:
        record = self.get_run(run_id)
        if record is None:
            raise LookupError(f"no run '{run_id}'")
        if not record.summary.state.is_final:
            raise ValueError(f"run {run_id} is {record.summary.state.value}: cancel it first")
        with self._db() as db:
            for table in ("runs", "transitions", "nodes", "offsets"):
                db.execute(f"DELETE FROM {table} WHERE run_id=?", (run_id,))
        shutil.rmtree(record.directory, ignore_errors=True)


_LAST_DETAIL = ("(SELECT detail FROM transitions t WHERE t.run_id = runs.run_id ORDER BY t.at DESC, t.rowid DESC "
                "LIMIT 1)")


def _summary(row: tuple[Any, ...]) -> RunSummary:
    return RunSummary(run_id=row[0], experiment=row[1], state=RunState(row[2]), attempt=row[3],
                      num_nodes=row[4], hosts=tuple(json.loads(row[5])), started_at=row[6], ended_at=row[7],
                      last_loss=row[8], best_eval_loss=row[9], step=row[10], max_steps=row[11],
                      workload_path=row[12], output_dir=row[13], detail=(row[16] if len(row) > 16 else "") or "")
