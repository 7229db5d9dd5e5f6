"""Runs whose owner died, given a new one; ended runs with something unsent to MLflow, given a sender. What
every look at the runs (``runs``, ``show``, ``logs``, the app's home) does first, so it stays light: the
store, the owners' locks and the senders' index, nothing of the workload's models or the backends."""

from __future__ import annotations

from pathlib import Path

from launcher.runs.core import pending
from launcher.runs.core.ownership import adopt_orphans
from launcher.runs.core.store import RunStore


def adopt_orphans_of(home: Path) -> list[str]:
    """Every live run without an owner gets one; what ``runs``, ``show``, ``logs`` and the app call
    before showing runs, so a run whose owner died is caught up and finished. An ended run with something
    its owner could not send to MLflow gets a detached sender (:mod:`launcher.runs.core.pending`)."""
    adopted = adopt_orphans(home, RunStore(home).active_runs())
    pending.start_senders(home)
    return adopted
