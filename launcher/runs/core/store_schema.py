"""The run store's file: its tables and the indexes every query reads through, and how a connection to it is
made ready (a foreign database refused, WAL switched on, the indexes an older store lacks built)."""

from __future__ import annotations

import sqlite3
import time

from launcher.events import NodeState

SCHEMA_VERSION = 1
LOST = f"state = '{NodeState.LOST.value}'"
"""The partial index of lost nodes and the query that reads it say this alike (SQLite uses such an index
only for a query whose WHERE holds its own)."""
SCHEMA = f"""
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
CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created_at);
CREATE INDEX IF NOT EXISTS runs_by_state ON runs(state, created_at);
CREATE INDEX IF NOT EXISTS runs_by_experiment ON runs(experiment, created_at);
CREATE INDEX IF NOT EXISTS runs_by_output_dir ON runs(rtrim(output_dir, '/'), created_at);
CREATE INDEX IF NOT EXISTS transitions_by_run ON transitions(run_id, at);
CREATE INDEX IF NOT EXISTS runs_by_id_nocase ON runs(run_id COLLATE NOCASE);
CREATE INDEX IF NOT EXISTS nodes_lost ON nodes(run_id) WHERE {LOST};
"""
TABLES = ("runs", "transitions", "nodes", "offsets")
INDEXES = ("runs_by_created", "runs_by_state", "runs_by_experiment", "runs_by_output_dir", "transitions_by_run",
            "runs_by_id_nocase", "nodes_lost")
"""Every query a command or the app makes is one of these or a primary key: the time a list takes follows
the rows it shows, not the runs kept (thousands in a team's data dir within weeks)."""
NO_ROOM = ("disk i/o error", "disk is full", "readonly", "read-only", "unable to open")




def refuse_foreign(db: sqlite3.Connection) -> None:
    """Another program's database is never written into (not even switched to WAL)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if tables - set(TABLES):
        db.close()
        raise sqlite3.DatabaseError(f"file is not a run store (it holds tables {sorted(tables)})")


def use_wal(db: sqlite3.Connection) -> None:
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


def add_indexes(db: sqlite3.Connection) -> None:
    """The indexes a store made before them lacks, built once (seconds at 100,000 runs). A full or
    read-only disk leaves them for a later command: reading works without them, only slower."""
    try:
        db.executescript(SCHEMA)
    except sqlite3.OperationalError as err:
        if not any(w in str(err).lower() for w in NO_ROOM):
            raise
