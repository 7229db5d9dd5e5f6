"""One run read as the front ends ask for it: its record, the monitor's view, its nodes, the report of
``show``, its last safe step, its metrics and samples, its workload and plan, a comparison of runs, its
stacks. The base of :class:`launcher.api.runs.Runs` (which adds finding, listing and acting): every
answer read from the records the runs' owners write, each module loaded when its answer is asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.runs.core.continuation import Continuation
    from launcher.runs.core.resume_badge import ResumeBasis
    from launcher.runs.core.safe_step import SafeStep
    from launcher.runs.core.samples import SampleSet
    from launcher.runs.core.store import RunRecord, RunStore
    from launcher.runs.read.comparison import RunStats
    from launcher.runs.read.nodes import NodeRow
    from launcher.runs.read.report import RunReport
    from launcher.runs.read.view import RunView
    from launcher.workload.plan import RunPlan
    from trainer.wire.protocol import MetricRecord


class RunNotFound(LookupError):
    """No run, or more than one, matches what was asked; ``str()`` is one line that says which and what to
    do (``no run '0a3f' (see fsdp-tui runs)``, ``'0a' matches 3 runs: ...``)."""


class RunReading:
    """The runs of one data dir (``home``) as they are read: one run's record and what is made of it."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)

    def _store(self) -> RunStore:
        from launcher.runs.core.store import RunStore

        return RunStore(self.home)

    def get(self, run_id: str) -> RunRecord | None:
        """The run's record (summary, state changes, nodes, its folder); ``None`` when there is no such run."""
        return self._store().get_run(run_id)

    def record(self, run_id: str) -> RunRecord:
        """As :meth:`get`, for a run that must exist: :class:`RunNotFound` otherwise."""
        record = self.get(run_id)
        if record is None:
            raise RunNotFound(f"no run '{run_id}' (see fsdp-tui runs)")
        return record

    def view(self, run_id: str) -> RunView:
        """The monitor's view of the run as its record holds it now (nodes, progress, rates)."""
        from launcher.runs.read.recorded_nodes import recorded_view

        return recorded_view(self.record(run_id))[0]

    def node_rows(self, run_id: str) -> list[NodeRow]:
        """Every node of the run as one row of figures, the odd node marked (``show --nodes``)."""
        from launcher.runs.read.recorded_nodes import recorded_rows

        return recorded_rows(self.record(run_id))

    def report(self, run_id: str) -> RunReport:
        """The run in words a user can act on (``fsdp-tui show``): state and why, nodes, triage, MLflow,
        the newest interconnect test of its nodes, its last safe step (asked of the node that holds its
        checkpoints: this blocks up to seconds), and what to do next (``resume`` among them even when no
        checkpoint is complete: :attr:`RunReport.last_safe_step` says whether one is)."""
        from dataclasses import replace

        from launcher.nettest.records import newest_for
        from launcher.runs.read.report import run_report

        report = run_report(self.home, run_id)
        return replace(report, nettest=newest_for(self.home, [n.host for n in report.nodes], besides=run_id),
                       last_safe_step=self.last_safe_step(run_id))

    def continued(self, run_id: str) -> Continuation | None:
        """The run (and checkpoint) this run continues, when it continues another run's checkpoint (its launch
        recorded which: ``resume``, or a ``resume: auto`` that found one; :meth:`Continuation.words` says it);
        ``None`` otherwise."""
        from launcher.runs.core.continuing import recorded

        return recorded(self.record(run_id).directory)

    def last_safe_step(self, run_id: str, *, ask_node: bool = True) -> SafeStep | None:
        """The run's own newest complete checkpoint: what its owner recorded (an ended run's, each gathered
        save of a live one), else asked of the node that holds it (blocks up to ~15 s: call it from a thread
        in an event loop); ``None`` for a run without ``output_dir``, and, without ``ask_node``, when nothing
        is recorded (no node is asked then: cheap enough to call every second)."""
        from launcher.runs.core.safe_step import known_safe_step, last_safe_step

        known, answer = known_safe_step(self.home, run_id)
        if known or not ask_node:
            return answer  # no event loop to start: nothing to ask
        import asyncio

        return asyncio.run(last_safe_step(self.home, run_id, ask_node=ask_node))

    def compare(self, run_ids: Sequence[str], labels: dict[str, str] | None = None) -> list[RunStats]:
        """The runs side by side: throughput, memory, losses, one row each (``fsdp-tui compare``)."""
        from launcher.runs.read.comparison import compare_runs

        return compare_runs(self.home, list(run_ids), labels)

    def clone(self, run_id: str) -> Path:
        """A copy of the run's workload file next to the original (``NAME-clone.yaml``, never over a file),
        to edit and launch again; where it went. ``LookupError``: no workload file; ``OSError``."""
        from launcher.runs.read.clone import clone_workload

        return clone_workload(self.record(run_id))

    def stacks(self, run_id: str, *, timeout_s: float = 60.0, poll_s: float = 0.2) -> StackDumps:
        """Every rank's stack on every node of a live run, asked of its owner (adopting the run first if it
        has none) and kept with the run; waits up to ``timeout_s`` for one dump per node. ``ValueError``:
        the run has ended."""
        import time

        from launcher.runs.adoption import adopt_orphans_of
        from launcher.runs.core.ownership import request_stacks

        record = self.record(run_id)
        if record.summary.state.is_final:
            raise ValueError(f"run {run_id} has ended ({record.summary.state.value}): no process to look at")
        folder = record.directory / "stacks"
        before = set(folder.glob("*.txt")) if folder.exists() else set()
        request_stacks(self.home, run_id)
        adopt_orphans_of(self.home)  # the owner answers; a run without one gets one
        deadline = time.monotonic() + timeout_s
        new: list[Path] = []
        while time.monotonic() < deadline:
            new = sorted(set(folder.glob("*.txt")) - before) if folder.exists() else []
            if len(new) >= len(record.nodes):
                break
            time.sleep(poll_s)
        return StackDumps(run_id, tuple(new), len(record.nodes))

    def request_stacks(self, run_id: str) -> None:
        """Ask the run's owner for every rank's stack, without waiting: each node's dump arrives as a
        ``StacksDumped`` event of :meth:`follow` and is kept in the run's folder."""
        from launcher.runs.core.ownership import request_stacks

        request_stacks(self.home, run_id)

    def metrics_file(self, run_id: str) -> Path:
        """Where the run's metrics (one JSON record a line, as the trainer sends them) are kept here."""
        from launcher.runs.core.layout import METRICS

        return self.record(run_id).directory / METRICS

    def metrics_since(self, run_id: str, offset: int = 0) -> tuple[list[MetricRecord], int]:
        """The run's metric records from byte ``offset`` of its metrics file on, decoded (a line that is not a
        record is skipped; one still being written is left for the next call), and the offset to ask from
        next: a screen that follows a run reads each line once. No file yet: none, and ``offset`` again."""
        from trainer.wire.protocol import MetricRecord

        try:
            with open(self.metrics_file(run_id), "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except OSError:
            return [], offset
        complete = chunk[: chunk.rfind(b"\n") + 1]
        records = [MetricRecord.from_json(line) for line in complete.decode("utf-8", errors="replace").splitlines()]
        return [r for r in records if r is not None], offset + len(complete)

    def samples(self, run_id: str) -> list[SampleSet]:
        """What the model answered as it learned (``logging.samples``), one set per sampled step."""
        from launcher.runs.core.samples import read_samples

        return read_samples(self.record(run_id).directory)

    def workload_text(self, run_id: str) -> str:
        """The workload the run ran, as recorded (not the file as it is now)."""
        return (self.record(run_id).directory / "workload.yaml").read_text()

    def resume_basis_of(self, run_id: str) -> ResumeBasis | None:
        """What of the run's plan as recorded (not validated again) decides whether it may have resumed
        (``None``: no plan on record): what a :class:`RunView` needs to tell a resume's badge from a job's word."""
        from launcher.runs.core.layout import read_plan
        from launcher.runs.core.resume_badge import ResumeBasis

        plan = read_plan(self.record(run_id).directory)
        return ResumeBasis.of_plan(plan) if plan is not None else None

    def plan_of(self, run_id: str) -> RunPlan:
        """The plan the run was launched with. ``OSError``/``ValueError``: none on record (an old run)."""
        from launcher.runs.core.layout import load_plan

        return load_plan(self.record(run_id).directory)


@dataclass(frozen=True)
class StackDumps:
    """The stack dumps that arrived for one request, one file per node, kept in the run's folder."""

    run_id: str
    files: tuple[Path, ...]
    wanted: int
    """How many nodes were asked (one file each)."""

    @property
    def complete(self) -> bool:
        """Every node asked has sent its dump."""
        return len(self.files) >= self.wanted
