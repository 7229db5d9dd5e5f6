"""What kind of run a record is, beyond its state: a probe of ``doctor --estimate``, an interconnect test
(``nettest``), or a training run; and whether a resume trained nothing (it continued a checkpoint and made
no step of its own). A probe cancelled at step 22 of 300, read as a training run, looks like a run that
stopped early: the run list says what it was.

Read from the run's launch options (the tags a probe and a nettest are started with, and the run a launch
continued) and from how its owner recorded its end: a run that ended without a step of its own is recorded
``trained nothing: ...`` by its owner (:mod:`launcher.runs.core.continuing`), the one place that decides it.
Light (no workload models): the run list and the app's home read it for every run they show."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from launcher.paths import run_dir
from launcher.runs.core.continuation import TRAINED_NOTHING
from launcher.runs.core.layout import read_options
from launcher.runs.core.store import RunSummary

PROBE_TAG = "fsdp_tui.probe"
"""The launch tag (``options.json``) that marks a run as an estimate's probe."""
NETTEST_TAG = "fsdp_tui.nettest"
"""The launch tag of an interconnect test's run (``fsdp-tui nettest``)."""
NETTEST_RECORDS = "nettests"
"""Where the kept tests lie under the data dir (one ``<run id>.json`` each): a test started before the tag
was is known by its record."""
Kind = Literal["training", "probe", "nettest"]


@dataclass(frozen=True)
class RunKind:
    run_id: str
    kind: Kind = "training"
    trained_nothing: bool = False
    """A resume that ended without a step of its own (it continued ``continued`` and trained nothing)."""
    continued: str | None = None
    """The run a resume continued (its checkpoint's run), when the run is a resume."""

    @property
    def mark(self) -> str:
        """A word or two beside the run's state (empty for an ordinary training run)."""
        if self.kind != "training":
            return self.kind
        return "trained nothing" if self.trained_nothing else ""

    def words(self) -> str:
        """The mark said in full, for the run list's why column."""
        if self.kind == "probe":
            return "probe of doctor --estimate (its first steps, timed, then cancelled)"
        if self.kind == "nettest":
            return "interconnect test (fsdp-tui nettest), not a training run"
        if self.trained_nothing:
            return f"trained nothing: a resume of {self.continued} that made no step of its own" if self.continued \
                else "trained nothing: a resume that made no step of its own"
        return ""


def run_kind(home: Path, summary: RunSummary) -> RunKind:
    """The kind of the run ``summary`` sums up, from its folder (and a kept nettest record under ``home``)."""
    directory = run_dir(home, summary.run_id)
    options = read_options(directory)
    if options.tagged(PROBE_TAG):
        return RunKind(summary.run_id, "probe")
    if options.tagged(NETTEST_TAG) or (home / NETTEST_RECORDS / f"{summary.run_id}.json").is_file():
        return RunKind(summary.run_id, "nettest")
    found = options.continues
    nothing = summary.state.is_final and summary.detail.startswith(TRAINED_NOTHING)
    return RunKind(summary.run_id, trained_nothing=nothing, continued=found.run_id if found else None)
