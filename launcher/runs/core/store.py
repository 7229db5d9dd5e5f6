"""The run store: one SQLite database (WAL) in the data dir, safe for a launcher and readers at once."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from launcher.events import NodeState, RunState
from launcher.paths import private_dir, private_file, run_dir
from launcher.runs.core.run_records import NodeRecord as NodeRecord
from launcher.runs.core.run_records import RunRecord as RunRecord
from launcher.runs.core.run_records import RunSummary as RunSummary
from launcher.runs.core.store_schema import (
    INDEXES,
    LOST,
    NO_ROOM,
    SCHEMA,
    SCHEMA_VERSION,
    TABLES,
    add_indexes,
    refuse_foreign,
    use_wal,
)
from launcher.words import plural


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
            names = dict(db.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'index')"))
            tables = {n for n, kind in names.items() if kind == "table"}
            if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION or tables != set(TABLES):
                db.executescript(SCHEMA)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif not set(INDEXES) <= set(names):
                add_indexes(db)

    def _db(self) -> sqlite3.Connection:
        """This thread's connection, opened once (a launch writes node states and offsets often);
        autocommit, so every statement is durable on its own."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA busy_timeout=30000")
            try:
                refuse_foreign(db)
                use_wal(db)
            except sqlite3.OperationalError as err:
                if not self.path.exists() or not any(w in str(err).lower() for w in NO_ROOM):
                    raise
                db.close()
                db = self._read_only()
                refuse_foreign(db)
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
    def restore_runs(self, runs: Iterable[tuple[RunSummary, list[tuple[float, RunState, int, str]],
                                                list[NodeRecord], float]]) -> None:
        """Runs' index rows as read back from their folders (:mod:`launcher.runs.core.rebuild`: summary,
        state changes, nodes, when it was created), in one transaction: all are indexed or none (a run is
        never indexed in part), and thousands take one commit, not one each."""
        with self._transaction("BEGIN") as db:
            for s, transitions, nodes, created_at in runs:
                db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", (
                    s.run_id, s.experiment, s.state.value, s.attempt, s.num_nodes, json.dumps(list(s.hosts)),
                    s.started_at, s.ended_at, s.last_loss, s.best_eval_loss, s.step, s.max_steps, s.workload_path,
                    s.output_dir, None, created_at))
                db.executemany("INSERT INTO transitions VALUES (?,?,?,?,?)",
                               [(s.run_id, at, state.value, attempt, detail)
                                for at, state, attempt, detail in transitions])
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
                  limit: int | None = None, matching: str = "") -> list[RunSummary]:
        """Newest first; ``state`` and ``experiment`` filter exactly, ``matching`` keeps the runs whose id,
        experiment or state holds every one of its words (any case), ``limit`` keeps the newest N. Rows are
        read in the order of an index and the reading stops at ``limit``."""
        where, args = _where(state, experiment, matching)
        sql = (f"SELECT runs.*, {_LAST_DETAIL} FROM runs{where} ORDER BY created_at DESC"
               + (" LIMIT ?" if limit else ""))
        with self._db() as db:
            rows = db.execute(sql, (*args, *([limit] if limit else []))).fetchall()
        return [_summary(r) for r in rows]

    @_guarded
    def count_runs(self, *, state: str | None = None, experiment: str | None = None, matching: str = "") -> int:
        """How many runs :meth:`list_runs` would list without a limit (a count over an index: no rows read)."""
        where, args = _where(state, experiment, matching)
        with self._db() as db:
            return db.execute(f"SELECT COUNT(*) FROM runs{where}", args).fetchone()[0]

    @_guarded
    def active_runs(self) -> list[str]:
        """Runs that have not ended (read through the state's index: the runs that ended are not read)."""
        live = [s.value for s in RunState if not s.is_final]
        with self._db() as db:
            rows = db.execute(f"SELECT run_id FROM runs WHERE state IN ({', '.join('?' * len(live))})",
                              live).fetchall()
        return [r[0] for r in rows]

    @_guarded
    def lost_nodes(self, limit: int = 200) -> dict[str, list[int]]:
        """The nodes lost in the newest ``limit`` failed runs that lost any, by run (newest first). Read
        through the index of lost nodes alone (``nodes_lost``), each one's run through its key: what this
        reads follows the nodes ever lost, not the runs kept (every command that shows runs asks it first)."""
        with self._db() as db:
            rows = db.execute("SELECT r.run_id, n.node_rank, r.created_at FROM nodes n CROSS JOIN runs r "
                              f"ON r.run_id = n.run_id WHERE n.{LOST} AND r.state = ?",
                              (RunState.FAILED.value,)).fetchall()
        out: dict[str, list[int]] = {}
        for run_id, rank, _at in sorted(rows, key=lambda row: (-row[2], row[0], row[1])):
            if run_id in out or len(out) < limit:
                out.setdefault(run_id, []).append(rank)
        return out

    @_guarded
    def using_output_dir(self, output_dir: str, limit: int = 100) -> list[RunSummary]:
        """The runs whose ``output_dir`` is ``output_dir`` (trailing slashes aside), newest first."""
        key = output_dir.rstrip("/")
        with self._db() as db:
            rows = db.execute(f"SELECT runs.*, {_LAST_DETAIL} FROM runs WHERE rtrim(output_dir, '/') = ? "
                              "AND output_dir != '' ORDER BY created_at DESC LIMIT ?", (key, limit)).fetchall()
        return [_summary(r) for r in rows]

    @_guarded
    def output_dirs_spelled_otherwise(self, limit: int = 1000) -> list[RunSummary]:
        """The runs whose ``output_dir`` may name a folder other than its text (a ``$VARIABLE``, ``~``,
        repeated slashes), newest first: only their recorded plan says which (a scan of the runs table, which
        holds one short row per run)."""
        with self._db() as db:
            rows = db.execute(f"SELECT runs.*, {_LAST_DETAIL} FROM runs WHERE output_dir != '' AND ("
                              "instr(output_dir, '$') > 0 OR output_dir LIKE '~%' OR instr(output_dir, '//') > 0) "
                              "ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        return [_summary(r) for r in rows]

    @_guarded
    def runs_named_in(self, text: str) -> list[str]:
        """The ids of the runs that ``text`` (a path) holds, longest first. A run id starts with its
        date and time (``20261122-1130...``, :func:`launcher.paths.new_run_id`): each stretch of the text
        that starts so is looked up by its every prefix, through the primary key."""
        candidates = {m.group(1)[:end] for m in _ID_START.finditer(text)
                      for end in range(_ID_MIN, len(m.group(1)) + 1)}
        if not candidates:
            return []
        with self._db() as db:
            rows = db.execute(f"SELECT run_id FROM runs WHERE run_id IN ({', '.join('?' * len(candidates))})",
                              sorted(candidates)).fetchall()
        return sorted((r[0] for r in rows), key=len, reverse=True)

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
        shows); ``LookupError`` says why not. A prefix is read through ``runs_by_id_nocase`` (LIKE's
        own case folding); an id's end is not indexed: it reads every id (tens of ms at 100,000 runs)."""
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


_ID_START = re.compile(r"(?=(\d{8}-\d{4}[A-Za-z0-9_.-]*))")
"""Where a run id may start in a path, and the stretch of id characters from there."""
_ID_MIN = len("20261122-1130-x")


def _where(state: str | None, experiment: str | None, matching: str) -> tuple[str, list[Any]]:
    """The ``WHERE`` of a listing (with its leading space, empty when none) and its arguments."""
    where: list[str] = []
    args: list[Any] = []
    if state:
        where.append("state = ?")
        args.append(state)
    if experiment:
        where.append("experiment = ?")
        args.append(experiment)
    for word in matching.lower().split():
        where.append("instr(lower(run_id || ' ' || experiment || ' ' || state), ?) > 0")
        args.append(word)
    return (" WHERE " + " AND ".join(where) if where else ""), args


_LAST_DETAIL = ("(SELECT detail FROM transitions t WHERE t.run_id = runs.run_id ORDER BY t.at DESC, t.rowid DESC "
                "LIMIT 1)")


def _summary(row: tuple[Any, ...]) -> RunSummary:
    return RunSummary(run_id=row[0], experiment=row[1], state=RunState(row[2]), attempt=row[3],
                      num_nodes=row[4], hosts=tuple(json.loads(row[5])), started_at=row[6], ended_at=row[7],
                      last_loss=row[8], best_eval_loss=row[9], step=row[10], max_steps=row[11],
                      workload_path=row[12], output_dir=row[13], detail=(row[16] if len(row) > 16 else "") or "")
