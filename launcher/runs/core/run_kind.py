"""What kind of run a record is, beyond its state: a probe of ``doctor --estimate``, an interconnect test
(``nettest``), or a training run; and whether a resume trained nothing (it continued a checkpoint and made
no step of its own). A probe cancelled at step 22 of 300, read as a training run, looks like a run that
stopped early: the run list says what it was.

Read from the run's folder: its launch options (the tags a probe and a nettest are started with), its plan
(whether it is the built-in trainer and which run it continued) and its own metrics (a train record)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from launcher.paths import run_dir
from launcher.runs.core.estimates import PROBE_TAG
from launcher.runs.core.layout import LOG_METRICS, METRICS, PLAN, load_options
from launcher.runs.core.store import RunSummary

NETTEST_TAG = "fsdp_tui.nettest"
"""The launch tag of an interconnect test's run (``fsdp-tui nettest``)."""
NETTEST_RECORDS = "nettests"
"""Where the kept tests lie under the data dir (one ``<run id>.json`` each): a test started before the tag
was is known by its record."""
_TRAIN = b'"kind":"train"'

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
    tags = load_options(directory).get("tags", {})
    if tags.get(PROBE_TAG) == "1":
        return RunKind(summary.run_id, "probe")
    if tags.get(NETTEST_TAG) == "1" or (home / NETTEST_RECORDS / f"{summary.run_id}.json").is_file():
        return RunKind(summary.run_id, "nettest")
    continued = _continued(directory)
    if continued is None:
        return RunKind(summary.run_id)
    nothing = summary.state.is_final and not _trained(directory)
    return RunKind(summary.run_id, trained_nothing=nothing, continued=continued or None)


def _continued(directory: Path) -> str | None:
    """The run a resume of the built-in trainer continued (``""`` when it resumed without saying whose
    checkpoint it was); ``None`` when the run is no resume."""
    try:
        workload = json.loads((directory / PLAN).read_text())["workload"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(workload, dict) or workload.get("command") is not None:
        return None
    checkpoint = (workload.get("parameters") or {}).get("checkpoint") or {}
    if not isinstance(checkpoint, dict):
        return None
    runs = checkpoint.get("resume_runs")
    if isinstance(runs, list) and runs and isinstance(runs[0], str):
        return runs[0]
    resume = checkpoint.get("resume")
    return "" if isinstance(resume, str) and resume not in ("auto", "never", "") else None


def _trained(directory: Path) -> bool:
    """Whether the run's own metrics hold a train record (a step it made)."""
    for name in (METRICS, LOG_METRICS):
        try:
            with open(directory / name, "rb") as f:
                for line in f:
                    if _TRAIN in line:
                        return True
        except OSError:
            continue
    return False
