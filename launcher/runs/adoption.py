"""Runs whose owner died, given a new one; ended runs with something unsent to MLflow, given a sender. What
every look at the runs (``runs``, ``show``, ``logs``, the app's home) does first, so it stays light: the
store, the owners' locks and the senders' index, nothing of the workload's models or the backends."""

from __future__ import annotations

from pathlib import Path

from launcher.runs.core import pending
from launcher.runs.core.ownership import adopt_orphans, kept_end
from launcher.runs.core.space import shortage
from launcher.runs.core.store import RunStore

END_ROOM = 1 << 20
"""Room (above the data dir's floor) a new owner needs to catch a run up and write its end."""


def adopt_orphans_of(home: Path) -> list[str]:
    """Every live run without an owner gets one; what ``runs``, ``show``, ``logs`` and the app call
    before showing runs, so a run whose owner died is caught up and finished. An ended run with something
    its owner could not send to MLflow gets a detached sender (:mod:`launcher.runs.core.pending`). A run
    whose owner gave up waiting for room to write its end is left until the data dir has room again."""
    active = RunStore(home).active_runs()
    if any(_waits_for_room(home, run_id) for run_id in active) and shortage(Path(home), END_ROOM):
        # An owner gave up writing such a run's end: a new one would find no more room. The run says so
        # (its owner's note and the end it kept); the first look that finds room adopts it.
        active = [run_id for run_id in active if not _waits_for_room(home, run_id)]
    adopted = adopt_orphans(home, active)
    pending.start_senders(home)
    return adopted


def _waits_for_room(home: Path, run_id: str) -> bool:
    end = kept_end(home, run_id)
    return end is not None and end.gave_up
