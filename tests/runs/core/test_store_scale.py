"""The run store at scale: a data dir of 10,000 runs, filled through the store's own API. What `runs`,
`show`, the app's home and the other lists ask of it is a fixed number of statements, each read through an
index or a primary key (SQLite's own query plans say so): the same statements at 1,000 runs as at 10,000.
Counted, never timed (BENCHMARKS.md has the times, at 10,000 and 100,000 runs)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from launcher.runs.core.store import RunStore
from tests.support.many_runs import fill, run_id


class Statements:
    """Every SQL statement any store connection of this process runs (SQLite's trace callback), and the
    work they did: SQLite's virtual machine instructions, counted in hundreds (its progress handler). A
    query plan can look indexed and still read a table's every row through an index (a ``SEARCH`` on a
    state most runs share, a ``SCAN ... USING COVERING INDEX``): the work done says so."""

    STEP = 100

    def __init__(self, monkeypatch) -> None:
        self.seen: list[str] = []
        self.work = 0
        real = sqlite3.connect

        def counted() -> int:
            self.work += self.STEP
            return 0

        def connect(*args, **kwargs):
            db = real(*args, **kwargs)
            db.set_trace_callback(self.seen.append)
            db.set_progress_handler(counted, self.STEP)
            return db

        monkeypatch.setattr(sqlite3, "connect", connect)

    def during(self, call) -> list[str]:
        self.seen.clear()
        self.work = 0
        call()
        return [s for s in self.seen if not s.startswith(("PRAGMA", "BEGIN", "COMMIT"))]


def _plan_of(home: Path, statement: str) -> list[str]:
    db = sqlite3.connect(home / "runs.db")
    try:
        return [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + statement)]
    finally:
        db.close()


def _unindexed(plan: list[str]) -> list[str]:
    """Steps of a query plan that read a table whole or sort its rows (``SCAN runs`` alone is a full
    scan; ``SCAN runs USING INDEX`` reads in an index's order and stops at the limit)."""
    return [step for step in plan if (re.fullmatch(r"SCAN \w+", step) and step != "SCAN sqlite_master")
            or "TEMP B-TREE" in step]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two data dirs: 1,000 runs and 10,000 (the first 1,000 the same)."""
    small, large = tmp_path_factory.mktemp("small"), tmp_path_factory.mktemp("large")
    fill(small, 0, 1000)
    fill(large, 0, 1000)
    fill(large, 1000, 10_000)
    return small, large


def _client_calls(home: Path, capsys) -> dict[str, object]:
    from launcher.api import Client
    from launcher.cli.main import main
    from tui.screens.home import HOME_RUNS

    client = Client(home)
    newest = run_id(999) if (home / "runs" / run_id(999)).exists() else run_id(9_999)

    def cli(*args: str):
        def call():
            assert main(list(args)) == 0
            capsys.readouterr()
        return call

    def home_screen():  # what the app's home asks of the door on each look (tui/screens/home.py)
        total = client.runs.count()
        client.runs.list(limit=HOME_RUNS)
        client.runs.list(limit=HOME_RUNS, matching="sweep-3" if total > HOME_RUNS else "")

    return {
        "runs": cli("runs"),
        "runs --limit 20": cli("runs", "--limit", "20"),
        "runs --state failed --json": cli("runs", "--state", "failed", "--json"),
        "runs --experiment sweep-2": cli("runs", "--experiment", "sweep-2"),
        "show": cli("show", newest),
        "the app's home": home_screen,
        "live runs (adopt)": client.runs.adopt,
        "a run found by its tail": lambda: client.runs.find(newest[-5:]),
        "users of an output_dir": lambda: RunStore(home).using_output_dir("/ckpt/exp-1"),
        "runs a resume path names": lambda: RunStore(home).runs_named_in(f"/x/runs/{newest}/ckpt/step-5"),
    }


def test_every_list_reads_what_it_shows_through_an_index_at_10000_runs(stores, monkeypatch, capsys):
    small, large = stores
    monkeypatch.setenv("FSDP_TUI_HOME", str(large))
    statements = Statements(monkeypatch)
    at_large, work_large = {}, {}
    for name, call in _client_calls(large, capsys).items():
        at_large[name] = statements.during(call)
        work_large[name] = statements.work
    monkeypatch.setenv("FSDP_TUI_HOME", str(small))
    at_small, work_small = {}, {}
    for name, call in _client_calls(small, capsys).items():
        at_small[name] = statements.during(call)
        work_small[name] = statements.work
    for name, said in at_large.items():
        assert said, name
        # The same number of statements whatever the number of runs kept: none per run but those shown.
        assert len(said) == len(at_small[name]), (name, len(said), len(at_small[name]))
        for statement in said:
            if statement.startswith(("SELECT", "INSERT", "UPDATE", "DELETE")):
                plan = _plan_of(large, statement)
                if "instr(lower(" in statement:  # words matched in the id: read newest first, to the window
                    assert plan == ["SCAN runs USING INDEX runs_by_created", "CORRELATED SCALAR SUBQUERY 1",
                                    "SEARCH t USING INDEX transitions_by_run (run_id=?)"], plan
                    continue
                assert not _unindexed(plan), (name, statement[:300], plan)
    assert len(at_large["runs"]) <= 30 + 4 * 50  # the newest 50, each run's record read once
    # The work itself, not only the statements: what these read follows what they show, so ten times the
    # runs costs the same (a B-tree a level deeper aside). A filter's count reads the index entries that
    # match it, and a word filter reads newest first until its window is full: those grow with the runs
    # they match. An id's end is not indexed: that lookup reads every id (the short id the app shows).
    for name in ("runs", "runs --limit 20", "show", "live runs (adopt)", "users of an output_dir",
                 "runs a resume path names"):
        assert work_large[name] <= work_small[name] * 1.1 + Statements.STEP, (name, work_small[name],
                                                                               work_large[name])


def test_runs_says_how_many_it_did_not_show(stores, monkeypatch, capsys):
    from launcher.cli.main import main

    _small, large = stores
    monkeypatch.setenv("FSDP_TUI_HOME", str(large))
    assert main(["runs", "--limit", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 + 3 + 1
    assert [line.split()[0] for line in out[1:4]] == [run_id(9_999), run_id(9_998), run_id(9_997)]
    assert out[-1] == "the newest 3 of 10,000 runs shown (--limit N for more, --all for every one)"
    assert main(["runs", "--state", "timed_out", "--limit", "5000"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 + 2000 and "shown" not in out[-1]  # every one of them: nothing more to say
    with pytest.raises(SystemExit):
        main(["runs", "--limit", "²"])
    assert "'²' is not a count of runs" in capsys.readouterr().err


def test_a_store_made_before_the_indexes_gets_them_when_opened(tmp_path):
    fill(tmp_path, 0, 50)
    db = sqlite3.connect(tmp_path / "runs.db")
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='index' AND name NOT LIKE 'sqlite_%'").fetchall():
        db.execute(f"DROP INDEX {name}")
    db.commit()
    db.close()
    store = RunStore(tmp_path)
    plan = _plan_of(tmp_path, "SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 5")
    assert not _unindexed(plan), plan
    assert [r.run_id for r in store.list_runs(limit=2)] == [run_id(49), run_id(48)]
