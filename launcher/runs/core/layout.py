"""Where a run's record lies in its folder (``runs/<id>/``) and how its plain parts are read: the plan,
the launch options, the node log mirrors, the metrics files. Both sides use it: the owner writes these
files (:class:`~launcher.runs.owner.recorder.Recorder`), the launch writes the plan before the owner
starts, and every reader finds them here, so a reader never needs the writer's module."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from launcher.events import RunEvent, event_to_dict
from launcher.runs.core.swaps import Swap
from launcher.runs.core.triage import TriageReport
from launcher.workload.plan import RunPlan, plan_from_json, plan_to_json
from trainer.wire.protocol import MetricRecord, ResumeCheck

PLAN = "plan.json"
OPTIONS = "options.json"
"""How the run was asked to launch (``force``: skip the preflight checks)."""
FORCED = "forced.txt"
"""What a run launched with ``--force`` was forced past (the checks that would have refused it)."""
FORCED_NOTE = "launched with --force past: "
"""How a forced run's state detail starts, even when it succeeds (``show`` and ``runs`` print it)."""
EVENTS = "events.jsonl"
METRICS = "metrics.jsonl"
SAMPLES = "samples.jsonl"
"""What the model answered as it learned (``logging.samples``): node 0's samples file, mirrored byte for byte."""
LOG_METRICS = "log-metrics.jsonl"
GATHERS = "gathers.jsonl"
"""The run's gathers of checkpoints (when its nodes keep separate folders): one JSON line per checkpoint
made whole (what, from which nodes, bytes, seconds) or not (why)."""
RESUME_CHECK = "resume-check.json"
"""The newest attempt's resume check (the trainer's ``resume_check`` record, as sent): the badge that
``show``, ``runs`` and the app read without scanning the metrics."""
STATE_FILE = "mlflow.json"
"""What the owner has logged to MLflow for the run (its MLflow run id, the last step sent)."""
SWAPS = "swaps.json"
"""The nodes the run's owner replaced after failures (:class:`~launcher.runs.core.swaps.Swap`), oldest first."""
TRIAGE = "triage.json"
"""Why the run ended as it did (:class:`~launcher.runs.core.triage.TriageReport`), written by its owner."""


def save_plan(directory: Path, plan: RunPlan) -> None:
    """The plan a run's owner (and any later one) runs: the resolved workload and the launch's choices."""
    tmp = directory / f".{PLAN}.tmp"
    tmp.write_text(json.dumps(plan_to_json(plan)))
    os.replace(tmp, directory / PLAN)


def load_plan(directory: Path) -> RunPlan:
    return plan_from_json(json.loads((directory / PLAN).read_text()))


def save_triage(directory: Path, report: TriageReport) -> None:
    """The run's triage, kept for every reader (``show``, the app, comparisons, notifications, MLflow)."""
    (directory / TRIAGE).write_text(json.dumps(report.to_dict(), indent=2))


def read_triage(directory: Path) -> TriageReport | None:
    """The run's triage as its owner kept it; ``None`` while it has none (or the file is not one)."""
    try:
        return TriageReport.from_wire(json.loads((directory / TRIAGE).read_text()))
    except (OSError, ValueError):
        return None


def load_options(directory: Path) -> dict:
    try:
        return json.loads((directory / OPTIONS).read_text())
    except (OSError, ValueError):
        return {}


def mirror_path(directory: Path, rank: int) -> Path:
    return directory / "nodes" / f"{rank}.log"


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def event_line(event: RunEvent, at: float | None = None) -> str:
    """One line of ``events.jsonl``: the event and when it happened (the run's folder keeps the times
    of its state changes, so the store can be rebuilt from it)."""
    return json.dumps({**event_to_dict(event), "at": time.time() if at is None else at})


def last_lines(path: Path, max_bytes: int) -> list[bytes]:
    """The complete lines (no ``\n``) in the last ``max_bytes`` of ``path``: a line cut by the window and one
    still being written are left out; none when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - max_bytes))
            chunk = f.read()
    except OSError:
        return []
    lines = chunk.split(b"\n")
    return lines[1:-1] if size > max_bytes else lines[:-1]


def read_records(path: Path) -> list[MetricRecord]:
    if not path.exists():
        return []
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.endswith("\n"):
                record = MetricRecord.from_json(line)
                if record is not None:
                    out.append(record)
    return out


def read_resume_check(directory: Path) -> ResumeCheck | None:
    """The run's newest resume check; ``None`` for a run that did not resume (or whose trainer does not check)."""
    try:
        record = MetricRecord.from_json((directory / RESUME_CHECK).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return ResumeCheck.from_record(record) if record is not None else None


def read_gathers(directory: Path) -> list[dict]:
    """The run's gathers as recorded (``show``): what was made whole, how fast, what could not be."""
    try:
        lines = (directory / GATHERS).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def read_swaps(directory: Path) -> list[Swap]:
    """The run's swaps, oldest first (none: it never replaced a node)."""
    try:
        data = json.loads((directory / SWAPS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    items = data.get("swaps") if isinstance(data, dict) else None
    return [s for s in (Swap.from_wire(x) for x in (items if isinstance(items, list) else ())) if s is not None]


def save_swaps(directory: Path, swaps: list[Swap]) -> None:
    """The run's swaps, whole or not at all (the owner rewrites the file as a swap settles)."""
    tmp = directory / f".{SWAPS}.tmp"
    tmp.write_text(json.dumps({"swaps": [s.to_dict() for s in swaps]}, indent=1), encoding="utf-8")
    os.replace(tmp, directory / SWAPS)
