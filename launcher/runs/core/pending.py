"""What of a run could not be sent to MLflow when it ended, and the sender started for it later.

The owner records the run's end first and sends it to MLflow after, within seconds; what a dead or
slow tracking server kept it from sending is marked (``mlflow-pending`` in the run's folder) and sent
later: by ``fsdp-tui mlflow sync RUN``, or by a sender that the next look at the runs (``runs``,
``show``, ``logs``, the app) starts detached, at most once per :data:`RETRY_S` a run. Nothing is lost
in between: the run's own record holds every metric, and ``mlflow.json`` what was sent.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from launcher.paths import run_dir
from launcher.runs.core.ownership import ROOT, owned

MARK = "mlflow-pending"
INDEX = "mlflow-pending"
"""The data dir's folder of runs with a mark (an empty file named for each): a look reads it, not every
run's folder (a directory walk of 100,000 runs takes seconds)."""
SENDING = "sending the run's end to MLflow"
"""The owner's note (:meth:`~launcher.runs.core.ownership.OwnerLock.note`) once the run's end is recorded
and only tracking keeps it: whoever waits for the run to end need not wait for that."""
RETRY_S = 30.0
"""A run's sender is started again at most this often (its mark's time is the last try)."""
SENDERS_PER_LOOK = 4
"""Senders one look starts at most (the runs tried longest ago first): a tracking server down for days
with many runs waiting costs each look a few short processes, not one per run."""


_SENDERS: list[subprocess.Popen] = []
"""Senders this process started, waited for once they end."""


def _indexed(directory: Path) -> Path:
    """The index entry of the run whose folder is ``directory`` (``HOME/runs/RUN``)."""
    return directory.parent.parent / INDEX / directory.name


def mark(directory: Path, why: str) -> None:
    """Say that something of the run is not in MLflow yet, and why (the mark's time: the last try)."""
    with contextlib.suppress(OSError):
        (directory / MARK).write_text(why + "\n")
        _indexed(directory).parent.mkdir(mode=0o700, exist_ok=True)
        _indexed(directory).touch()


def clear(directory: Path) -> None:
    for path in (directory / MARK, _indexed(directory)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _marked(home: Path) -> list[Path]:
    """The marks of every run with something unsent, found through the index. A data dir from before the
    index is walked once to make it."""
    index = Path(home) / INDEX
    if not index.is_dir():
        found = list((Path(home) / "runs").glob(f"*/{MARK}"))
        with contextlib.suppress(OSError):
            index.mkdir(mode=0o700, exist_ok=True)
            for path in found:
                (index / path.parent.name).touch()
        return found
    marks = []
    for entry in os.scandir(index):
        path = run_dir(Path(home), entry.name) / MARK
        if path.exists():
            marks.append(path)
        else:  # sent, or its run forgotten, since
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    return marks


def why_pending(directory: Path) -> str | None:
    """Why the run has something unsent (the last failure's words), or ``None`` when all was sent."""
    try:
        return (directory / MARK).read_text().strip() or "not sent yet"
    except FileNotFoundError:
        return None
    except OSError as err:
        return str(err)


def start_senders(home: Path) -> list[str]:
    """A detached sender for each ended run with something unsent whose last try is older than
    :data:`RETRY_S` (at most :data:`SENDERS_PER_LOOK`, the longest waiting first); returns their run ids.
    Cheap when there is nothing to send (one listing of the index, whatever the number of runs)."""
    _SENDERS[:] = [proc for proc in _SENDERS if proc.poll() is None]  # reaped: the app lives long
    started: list[str] = []
    now = time.time()
    marks = []
    for path in _marked(home):
        try:
            marks.append((path.stat().st_mtime, path))
        except OSError:
            continue
    for tried, path in sorted(marks):
        run_id = path.parent.name
        if len(started) >= SENDERS_PER_LOOK or now - tried < RETRY_S:
            break
        try:
            if owned(home, run_id):
                continue
            os.utime(path)  # the next look in the same moment leaves it to this one
        except OSError:
            continue
        argv = [sys.executable, "-m", "launcher.runs.owner.send_later", "--home", str(home), run_id]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        with open(run_dir(home, run_id) / "mlflow-sender.log", "ab") as log:
            _SENDERS.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             start_new_session=True, env=env))
        started.append(run_id)
    return started
