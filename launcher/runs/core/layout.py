"""Where a run's record lies in its folder (``runs/<id>/``) and how its plain parts are read: the plan,
the launch options, the node log mirrors, the metrics files. Both sides use it: the owner writes these
files (:class:`~launcher.runs.owner.recorder.Recorder`), the launch writes the plan before the owner
starts, and every reader finds them here, so a reader never needs the writer's module."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.events import RunEvent, event_to_dict
from launcher.runs.core.continuation import OPTION, Continuation
from launcher.runs.core.mlflow_notes import MlflowNotes
from launcher.runs.core.swaps import Swap
from launcher.runs.core.triage import TriageReport
from trainer.wire.json_value import JsonValue
from trainer.wire.protocol import MetricRecord, ResumeCheck

if TYPE_CHECKING:
    from launcher.workload.plan import RunPlan

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
made whole (what, from which nodes, bytes, seconds) or not (why), read and written by
:mod:`launcher.runs.core.gathers`."""
RESUME_CHECK = "resume-check.json"
"""The newest attempt's resume check (the trainer's ``resume_check`` record, as sent): the badge that
``show``, ``runs`` and the app read without scanning the metrics."""
STATE_FILE = "mlflow.json"
"""What the owner has logged to MLflow for the run (its MLflow run id, the last step sent)."""
SWAPS = "swaps.json"
"""The nodes the run's owner replaced after failures (:class:`~launcher.runs.core.swaps.Swap`), oldest first."""
TRIAGE = "triage.json"
"""Why the run ended as it did (:class:`~launcher.runs.core.triage.TriageReport`), written by its owner."""


@dataclass(frozen=True)
class PlanShape:
    """What a run's usage counts of its plan (its topology as the launch resolved it): ``gpu`` or ``cpu``,
    processes per node, the GPU model (``None``: not known)."""

    kind: str
    procs_per_node: int
    gpu_model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "procs_per_node": self.procs_per_node, "gpu_model": self.gpu_model}

    @classmethod
    def from_wire(cls, data: object) -> PlanShape | None:
        if not isinstance(data, dict):
            return None
        kind, procs, model = data.get("kind"), data.get("procs_per_node"), data.get("gpu_model")
        if kind not in ("gpu", "cpu") or not isinstance(procs, int) or isinstance(procs, bool) or procs < 1:
            return None
        return cls(kind, procs, model if isinstance(model, str) and model else None)


SHAPE = "shape"
"""The key of ``plan.json`` that keeps the plan's :class:`PlanShape` (a plan written before it has none)."""


@dataclass(frozen=True)
class RecordedPlan:
    """A run's plan as its launch recorded it (``plan.json``), read once and validated never again: what the
    run's readers (its row in the run list, ``show``, comparisons, notifications, estimates, the monitor's
    resume badge) take from it. :meth:`to_plan` rebuilds the :class:`RunPlan` (validated) for whoever runs it."""

    run_id: str
    workload: Mapping[str, JsonValue]
    """The resolved workload as recorded (JSON, as the user's file gave it): what a fingerprint and the resume
    badge read whole; its parts through :meth:`section` and the typed properties below."""
    node_dirs: tuple[str, ...]
    """Each node's folder there, as the launch (or a node swap) set it; empty for a plan without them."""
    shape: PlanShape | None
    """The plan's shape as its launch recorded it; ``None`` for a plan written before (:meth:`usage_shape`)."""
    document: Mapping[str, JsonValue]
    """The file's JSON, whole: what :meth:`to_plan` rebuilds the plan from."""

    @classmethod
    def from_wire(cls, data: object) -> RecordedPlan | None:
        """``plan.json`` decoded (``None``: not a plan); the parts the readers take are checked here, once."""
        if not isinstance(data, dict):
            return None
        workload, dirs = data.get("workload"), data.get("node_dirs")
        return cls(run_id=str(data.get("run_id") or ""), workload=workload if isinstance(workload, dict) else {},
                   node_dirs=tuple(d for d in dirs if isinstance(d, str)) if isinstance(dirs, list) else (),
                   shape=PlanShape.from_wire(data.get(SHAPE)), document=data)

    def section(self, *keys: str) -> Mapping[str, JsonValue]:
        """The workload's section at ``keys`` (``section("parameters", "checkpoint")``); empty when absent."""
        data: JsonValue | Mapping[str, JsonValue] = self.workload
        for key in keys:
            data = data.get(key) if isinstance(data, Mapping) else None
        return data if isinstance(data, Mapping) else {}

    def text(self, *keys: str) -> str | None:
        """The workload's text at ``keys`` (``text("mlflow", "tracking_uri")``); ``None``: absent or not text."""
        value = self.section(*keys[:-1]).get(keys[-1])
        return value if isinstance(value, str) else None

    def whole(self, *keys: str) -> int | None:
        """The workload's whole number at ``keys``; ``None``: absent or not one."""
        value = self.section(*keys[:-1]).get(keys[-1])
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def max_retries(self) -> int:
        return self.whole("max_retries") or 0

    @property
    def experiment_name(self) -> str | None:
        return self.text("experiment_name")

    @property
    def env_variables(self) -> dict[str, str]:
        """The workload's ``env_variables`` (recorded as text: the model wrote numbers so)."""
        return {k: v for k, v in self.section("env_variables").items() if isinstance(v, str)}

    @property
    def resume_runs(self) -> tuple[str, ...]:
        """The runs whose checkpoints its trainer may read (``checkpoint.resume_runs``), as recorded."""
        runs = self.section("parameters", "checkpoint").get("resume_runs")
        return tuple(r for r in runs if isinstance(r, str)) if isinstance(runs, list) else ()

    def usage_shape(self) -> PlanShape | None:
        """The shape usage counts: as recorded, or (a plan written before the launch kept it) resolved from
        its workload, validated this once; ``None`` when it no longer validates."""
        if self.shape is not None:
            return self.shape
        from launcher.workload.model import Workload
        from launcher.workload.topology import resolve_topology

        try:
            topo = resolve_topology(Workload.model_validate(dict(self.workload)))
        except ValueError:
            return None
        return PlanShape(topo.kind, topo.procs_per_node, topo.gpu_model)

    def place_words(self) -> str:
        """Where the run's checkpoints land, as its launch found it ("" for a run without ``output_dir``)."""
        from launcher.workload.ckpt_place import place_from_json

        place = place_from_json(self.document.get("ckpt_place"))
        return place.words() if place is not None else ""

    def to_plan(self) -> RunPlan:
        """The plan itself, rebuilt and validated (``ValueError``/``KeyError`` when it no longer is one)."""
        from launcher.workload.plan import plan_from_json

        return plan_from_json(dict(self.document))


def save_plan(directory: Path, plan: RunPlan) -> None:
    """The plan a run's owner (and any later one) runs: the resolved workload and the launch's choices, with
    its shape for the readers that count usage. (The workload's models are imported when a plan is written
    or rebuilt: listing runs needs none.)"""
    from launcher.workload.plan import plan_to_json

    t = plan.topology
    shape = PlanShape(t.kind, t.procs_per_node, t.gpu_model)
    write_whole(directory / PLAN, json.dumps({**plan_to_json(plan), SHAPE: shape.to_dict()}))


def read_plan(directory: Path) -> RecordedPlan | None:
    """The run's plan as recorded, not validated (``None``: none on record, or not a plan)."""
    return RecordedPlan.from_wire(read_json(directory / PLAN))


def load_plan(directory: Path) -> RunPlan:
    """The run's plan rebuilt and validated (``OSError``/``ValueError``: none on record, or no longer one)."""
    from launcher.workload.plan import plan_from_json

    return plan_from_json(json.loads((directory / PLAN).read_text()))


def write_whole(path: Path, text: str) -> None:
    """A record file written whole or not at all (aside, then renamed over it): a reader never finds half of
    one, and a write the disk refuses leaves the one before it (and no file aside)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def read_json(path: Path) -> object:
    """A record file's JSON (``None`` when it is absent or not JSON): the one raw read of a run's files,
    whose readers here each decode it into their type."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_json_lines(path: Path) -> list[object]:
    """A record's JSON lines, oldest first (none when the file is absent; a line that is not JSON is left
    out): the one raw read of a run's ``.jsonl`` records, whose readers each decode a line into their type."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def save_triage(directory: Path, report: TriageReport) -> None:
    """The run's triage, kept for every reader (``show``, the app, comparisons, notifications, MLflow)."""
    write_whole(directory / TRIAGE, json.dumps(report.to_dict(), indent=2))


def read_triage(directory: Path) -> TriageReport | None:
    """The run's triage as its owner kept it; ``None`` while it has none (or the file is not one)."""
    return TriageReport.from_wire(read_json(directory / TRIAGE))


def read_mlflow_state(directory: Path) -> MlflowNotes:
    """What the run's owner has logged to MLflow (``mlflow.json``, its tracker's own notes: the MLflow run id,
    how far each source is sent, the end it still owes); empty before it logged anything."""
    return MlflowNotes.of(read_json(directory / STATE_FILE))


def save_mlflow_state(directory: Path, state: MlflowNotes) -> None:
    """The tracker's notes, whole or not at all."""
    write_whole(directory / STATE_FILE, json.dumps(state.to_json()))


def read_mlflow_run_id(directory: Path) -> str | None:
    """The run's MLflow run id, once its owner opened one (``show``, the app); ``None`` before."""
    return read_mlflow_state(directory).run_id


@dataclass(frozen=True)
class Brought:
    """A checkpoint a resume's owner copies to its node 0 before the start (the launch option ``resume_from``):
    the run that wrote it, the folder of its checkpoints on the node that holds it (``None``: this machine)."""

    run: str
    root: str
    name: str
    node: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "node": self.node, "root": self.root, "name": self.name}

    @classmethod
    def from_wire(cls, data: object) -> Brought | None:
        if not isinstance(data, dict):
            return None
        run, root, name, node = data.get("run"), data.get("root"), data.get("name"), data.get("node")
        if not (isinstance(run, str) and isinstance(root, str) and isinstance(name, str)):
            return None
        return cls(run, root, name, node if isinstance(node, int) and not isinstance(node, bool) else None)


@dataclass(frozen=True)
class LaunchOptions:
    """How the run was asked to launch (``options.json``, written once by the launch): ``force`` skips the
    preflight checks; the launch's tags (a probe's, an interconnect test's); the checkpoint its owner brings
    to node 0 first; the run it continues; ``checked``: the launch ran the preflight checks already (its
    owner does not run them again)."""

    force: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    resume_from: Brought | None = None
    continues: Continuation | None = None
    checked: bool = False

    def tagged(self, tag: str) -> bool:
        """The launch carried ``tag`` (set to ``"1"``)."""
        return self.tags.get(tag) == "1"

    def to_dict(self) -> dict[str, Any]:
        return {"force": self.force, "checked": self.checked, "tags": dict(self.tags),
                **({"resume_from": self.resume_from.to_dict()} if self.resume_from else {}),
                **({OPTION: self.continues.to_option()} if self.continues else {})}

    @classmethod
    def from_wire(cls, data: object) -> LaunchOptions:
        """``options.json`` decoded; what is missing or of the wrong type reads as not asked."""
        if not isinstance(data, dict):
            return cls()
        tags = data.get("tags")
        return cls(force=data.get("force") is True,
                   tags={str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {},
                   resume_from=Brought.from_wire(data.get("resume_from")),
                   continues=Continuation.from_option(data.get(OPTION)), checked=data.get("checked") is True)


def save_forced(directory: Path, note: str) -> None:
    """What the run was forced past (:data:`FORCED_NOTE` and the refusals), kept over a change of owner."""
    write_whole(directory / FORCED, note)


def read_forced(directory: Path) -> str:
    """What the run was forced past, as its owner kept it (empty: nothing)."""
    try:
        return (directory / FORCED).read_text()
    except OSError:
        return ""


def save_options(directory: Path, options: LaunchOptions) -> None:
    """The launch's options, written once before the run's owner starts."""
    write_whole(directory / OPTIONS, json.dumps(options.to_dict()))


def read_options(directory: Path) -> LaunchOptions:
    """How the run was asked to launch (nothing asked: no file, or not one)."""
    return LaunchOptions.from_wire(read_json(directory / OPTIONS))


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


def save_resume_check(directory: Path, record: MetricRecord) -> None:
    """The newest attempt's resume check (a ``resume_check`` record, as the trainer sent it), whole or not
    at all: kept apart from the metrics it would be hard to find in."""
    write_whole(directory / RESUME_CHECK, record.to_json() + "\n")


def read_resume_check(directory: Path) -> ResumeCheck | None:
    """The run's newest resume check; ``None`` for a run that did not resume (or whose trainer does not check)."""
    try:
        record = MetricRecord.from_json((directory / RESUME_CHECK).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return ResumeCheck.from_record(record) if record is not None else None


def read_swaps(directory: Path) -> list[Swap]:
    """The run's swaps, oldest first (none: it never replaced a node)."""
    data = read_json(directory / SWAPS)
    items = data.get("swaps") if isinstance(data, dict) else None
    return [s for s in (Swap.from_wire(x) for x in (items if isinstance(items, list) else ())) if s is not None]


def save_swaps(directory: Path, swaps: list[Swap]) -> None:
    """The run's swaps, whole or not at all (the owner rewrites the file as a swap settles)."""
    write_whole(directory / SWAPS, json.dumps({"swaps": [s.to_dict() for s in swaps]}, indent=1))
