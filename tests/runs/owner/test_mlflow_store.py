"""A data dir's MLflow store (real SQLite stores, real MLflow): made whole or not at all, made from the blank
store kept once per MLflow version, and made as MLflow makes it where that blank cannot be kept or read."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.runs.owner import mlflow_store
from launcher.runs.owner.mlflow_store import blank_store, made_whole

pytestmark = pytest.mark.slow  # real MLflow stores: a second of CPU each made the long way


def _default(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT artifact_location FROM experiments WHERE experiment_id = 0").fetchone()[0]


def _takes_writes(path: Path) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    run = client.create_run(client.create_experiment("e"))
    client.log_metric(run.info.run_id, "loss", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"loss": 1.0}


def test_a_fresh_store_is_made_whole_even_when_its_maker_is_killed(tmp_path, monkeypatch):
    """MLflow migrates a SQLite store one statement at a time: the data dir's store (and the blank) is made in
    a file beside it and moved into place, so a maker killed at any moment leaves either no store or a whole
    one, and the next maker's store takes writes (the kill lands wherever the maker is then: its own cache,
    so it makes the blank the long way); what a killed maker left beside the store is gone after the next."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "mlflow.db"
    maker = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; "
                              "from launcher.runs.owner.mlflow_store import made_whole; "
                              "made_whole(Path(sys.argv[1]), Path(sys.argv[2]))", str(path), str(tmp_path / "art")])
    try:
        maker.wait(timeout=1.5)
    except subprocess.TimeoutExpired:
        maker.send_signal(signal.SIGKILL)
        maker.wait()
    assert not path.exists() or path.stat().st_size > 0
    blanks = list((tmp_path / "cache" / "fsdp-tui" / "mlflow").glob("blank-*.db"))
    assert all(_default(p) for p in blanks)  # the blank too: absent or whole
    for name in (".mlflow.db.4194305.new", ".mlflow.db.4194305.new-journal"):  # an earlier maker's, killed
        (tmp_path / name).write_bytes(b"half")
    made_whole(path, tmp_path / "art")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "mlflow.db"]  # no killed maker's file beside it
    _takes_writes(path)
    (tmp_path / ".mlflow.db.4194306.new").write_bytes(b"half")  # and beside a whole store
    (tmp_path / f".mlflow.db.{os.getppid()}.new").write_bytes(b"making")  # a live maker's (another data dir's)
    made_whole(path, tmp_path / "art")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".mlflow.db.{os.getppid()}.new", "cache", "mlflow.db"]


def test_every_store_after_the_first_is_the_blank_with_its_own_default_experiment(tmp_path, monkeypatch):
    """The first store makes the blank (MLflow's migrations, once per version); the next ones copy it, run no
    migration, and each names its own artifacts folder for the ``Default`` experiment; each takes writes."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "one").mkdir()
    made_whole(tmp_path / "one" / "mlflow.db", tmp_path / "one" / "artifacts")
    blank = blank_store()
    assert blank is not None and blank.parent == tmp_path / "cache" / "fsdp-tui" / "mlflow"

    def no_migrations(*_args):
        raise AssertionError("MLflow's migrations ran again")

    monkeypatch.setattr(mlflow_store, "_make", no_migrations)
    (tmp_path / "two").mkdir()
    made_whole(tmp_path / "two" / "mlflow.db", tmp_path / "two" / "artifacts")
    for name in ("one", "two"):
        assert _default(tmp_path / name / "mlflow.db") == (tmp_path / name / "artifacts" / "0").as_uri()
        _takes_writes(tmp_path / name / "mlflow.db")
    assert _default(blank).endswith("/unused-artifacts/0")  # the blank itself is never written to


@pytest.mark.parametrize("spoil", ["not-sqlite", "no-default", "cache-is-a-file"])
def test_a_blank_that_cannot_be_read_or_kept_leaves_the_store_made_the_long_way(tmp_path, monkeypatch, spoil):
    """A damaged blank (not SQLite, no ``Default`` experiment) or a cache that cannot be written: the store
    is made by MLflow's migrations, whole, and takes writes; nothing half-copied is left beside it. A damaged
    blank is made again by the next store."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    if spoil == "cache-is-a-file":
        cache.write_text("a file where the cache folder would be")
    else:
        blank = blank_store()
        assert blank is not None
        if spoil == "not-sqlite":
            blank.write_bytes(b"garbage " * 512)
        else:
            with sqlite3.connect(blank) as db:
                db.execute("DELETE FROM experiments")
    (tmp_path / "d").mkdir()
    made_whole(tmp_path / "d" / "mlflow.db", tmp_path / "d" / "artifacts")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["mlflow.db"]
    assert _default(tmp_path / "d" / "mlflow.db") == (tmp_path / "d" / "artifacts" / "0").as_uri()
    _takes_writes(tmp_path / "d" / "mlflow.db")
    if spoil != "cache-is-a-file":
        (tmp_path / "e").mkdir()
        made_whole(tmp_path / "e" / "mlflow.db", tmp_path / "e" / "artifacts")
        assert _default(tmp_path / "e" / "mlflow.db") == (tmp_path / "e" / "artifacts" / "0").as_uri()
        assert blank_store() == blank and _default(blank).endswith("/unused-artifacts/0")


def test_a_copy_that_finds_no_room_keeps_the_blank_and_the_store_is_made_the_long_way(tmp_path, monkeypatch):
    """The copy into the data dir failing (its disk full) is not the blank's fault: the blank stays."""
    import errno

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    blank = blank_store()
    assert blank is not None

    def no_room(_src, _dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mlflow_store.shutil, "copyfileobj", no_room)
    (tmp_path / "d").mkdir()
    made_whole(tmp_path / "d" / "mlflow.db", tmp_path / "d" / "artifacts")
    assert _default(tmp_path / "d" / "mlflow.db") == (tmp_path / "d" / "artifacts" / "0").as_uri()
    assert blank.is_file() and _default(blank).endswith("/unused-artifacts/0")
