"""Runs as the front ends ask for them: find one by a prefix of its id, list and read runs, follow one, and
launch, relaunch, resume, cancel and adopt. Launching is written once here: the app and ``fsdp-tui run``
both call :meth:`Runs.launch` and show its typed outcome (:class:`Launched`, :class:`Refused`,
:class:`AlreadyLaunched`) in their own way."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from launcher.events import RunEvent
    from launcher.runs.core.continuation import FRESH, Continuation
    from launcher.runs.core.estimate import Estimate, RealFigures
    from launcher.runs.core.estimates import KeptEstimate
    from launcher.runs.core.gathers import Gather, GatherNote
    from launcher.runs.core.layout import FORCED_NOTE, TRIAGE, PlanShape, RecordedPlan, ResumeCheck
    from launcher.runs.core.ownership import KeptEnd
    from launcher.runs.core.resume_badge import ResumeBasis
    from launcher.runs.core.run_kind import RunKind
    from launcher.runs.core.safe_step import NONE_YET, SafeStep
    from launcher.runs.core.samples import SampleSet
    from launcher.runs.core.space import RecordUnwritable
    from launcher.runs.core.store import NodeRecord, RunRecord, RunSummary, StoreDamaged
    from launcher.runs.core.triage import Signature, TriageReport, classify_line, might_signal
    from launcher.runs.core.usage import Usage
    from launcher.runs.launch import CancelReport, Resumed
    from launcher.runs.leftovers import JobMayLive
    from launcher.runs.owner.send_later import Sent
    from launcher.runs.read.comparison import RunStats
    from launcher.runs.read.follower import FollowGaveUp
    from launcher.runs.read.nodes import THRESHOLDS, NodeRow, node_rows
    from launcher.runs.read.ranks import THRESHOLD, RankReport, RankTimes
    from launcher.runs.read.report import RunReport
    from launcher.runs.read.view import RunView
    from launcher.workload.dry_run import CodeShipped, DryRun, NodeDryRun, SlurmDryRun, SnapshotSize
    from launcher.workload.fit import PlanFit
    from launcher.workload.load import Planned
    from launcher.workload.overrides import Override
    from launcher.workload.plan import RunPlan

from launcher.api._lazy import lazy_names
from launcher.api.launching import AlreadyLaunched, Launched, LaunchOutcome, Refused
from launcher.api.run_reading import RunNotFound, RunReading, StackDumps

_FROM = {
    "launcher.runs.core.continuation": ("FRESH", "Continuation"),
    "launcher.runs.core.estimate": ("Estimate", "RealFigures"),
    "launcher.runs.core.estimates": ("KeptEstimate",),
    "launcher.runs.core.gathers": ("Gather", "GatherNote"),
    "launcher.runs.core.layout": ("FORCED_NOTE", "TRIAGE", "PlanShape", "RecordedPlan", "ResumeCheck"),
    "launcher.runs.core.resume_badge": ("ResumeBasis",),
    "launcher.runs.core.run_kind": ("RunKind",),
    "launcher.runs.core.ownership": ("KeptEnd",),
    "launcher.runs.core.safe_step": ("NONE_YET", "SafeStep"),
    "launcher.runs.core.samples": ("SampleSet",),
    "launcher.runs.core.space": ("RecordUnwritable",),
    "launcher.runs.core.store": ("NodeRecord", "RunRecord", "RunSummary", "StoreDamaged"),
    "launcher.runs.core.triage": ("Signature", "TriageReport", "classify_line", "might_signal"),
    "launcher.runs.core.usage": ("Usage",),
    "launcher.runs.launch": ("CancelReport", "Resumed"),
    "launcher.runs.leftovers": ("JobMayLive",),
    "launcher.runs.owner.send_later": ("Sent",),
    "launcher.runs.read.comparison": ("RunStats",),
    "launcher.runs.read.follower": ("FollowGaveUp",),
    "launcher.runs.read.nodes": ("THRESHOLDS", "NodeRow", "node_rows"),
    "launcher.runs.read.ranks": ("THRESHOLD", "RankReport", "RankTimes"),
    "launcher.runs.read.report": ("RunReport",),
    "launcher.runs.read.view": ("RunView",),
    "launcher.workload.dry_run": ("CodeShipped", "DryRun", "NodeDryRun", "SlurmDryRun", "SnapshotSize"),
    "launcher.workload.fit": ("PlanFit",),
}
"""The core's types, errors and constants this door hands out (and the few functions the core computes with:
a log line's triage, a run's node rows), each loaded on first use (a command that only finds a run loads none
of them)."""
__getattr__ = lazy_names(__name__, _FROM)


__all__ = [
    "Continuation", "FORCED_NOTE", "FRESH", "NONE_YET", "THRESHOLD", "THRESHOLDS", "TRIAGE",
    "AlreadyLaunched", "CancelReport", "CodeShipped", "DryRun", "Estimate", "FollowGaveUp", "Gather", "GatherNote", "JobMayLive", "KeptEstimate", "KeptEnd", "LaunchOutcome", "Launched", "NodeRecord",
    "NodeDryRun", "NodeRow", "PlanFit", "PlanShape", "RankReport", "RankTimes", "RecordUnwritable", "RecordedPlan", "Refused", "ResumeCheck", "ResumeBasis", "Resumed", "RunKind", "RunListed",
    "RunNotFound", "RunRecord", "RunReport", "RunStats", "RunSummary", "RunView", "Runs", "SafeStep", "SampleSet", "Sent", "SlurmDryRun", "SnapshotSize",
    "RealFigures", "Signature", "StackDumps", "StoreDamaged", "TriageReport", "Usage", "classify_line", "might_signal",
    "node_rows",
]


@dataclass(frozen=True)
class RunListed:
    """One row of the run list: the run's summary and what the list shows beside it."""

    summary: RunSummary
    usage: Usage | None
    """Its GPU-hours (CPU-hours) and cost with prices in the settings; ``None`` without a record."""
    resume_check: ResumeCheck | None
    """Its newest resume's check; ``None``: it did not resume."""
    owner_note: str
    """What its owner says it waits for (``waiting for room: ...``); empty when it says nothing."""
    kind: RunKind
    """A probe, an interconnect test, or a training run (and whether a resume trained nothing)."""
    resume_ignored: str = ""
    """A resume check its job wrote though the run did not resume, ignored, in words; empty: none."""
    kept_end: KeptEnd | None = None
    """The end its owner could not write (the data dir's disk refused it) and keeps: its usage stops there."""


class Runs(RunReading):
    """The runs of one data dir (``home``): owns nothing else; every answer is read from the records the
    runs' owners write, every action hands work to an owner (started detached) and returns quickly."""

    # -- finding and listing ----------------------------------------------------------------------

    def find(self, prefix: str) -> str:
        """The run whose id starts with ``prefix`` (or ends with it: the short id the app shows); an exact id
        wins. :class:`RunNotFound` says, in one line, that none or several match."""
        try:
            return self._store().find(prefix)
        except LookupError as err:
            raise RunNotFound(str(err)) from None

    def listing(self, *, state: str | None = None, experiment: str | None = None,
                limit: int | None = None) -> list[RunListed]:
        """As ``list``, each run with its usage, resume check and its owner's note (``fsdp-tui runs``)."""
        import time

        from launcher.runs.core.layout import read_plan, read_resume_check
        from launcher.runs.core.ownership import kept_end, owner_note
        from launcher.runs.core.resume_badge import trusted
        from launcher.runs.core.run_kind import run_kind
        from launcher.runs.core.settings_prices import prices_set
        from launcher.runs.core.usage import usage_of_record

        store = self._store()
        prices = prices_set()
        now, out = time.time(), []
        for summary in store.list_runs(state=state, experiment=experiment, limit=limit):
            record = store.get_run(summary.run_id)
            plan = read_plan(record.directory) if record else None  # read once, not validated again
            kept = None if summary.state.is_final else kept_end(self.home, summary.run_id)
            usage = usage_of_record(record, plan, prices, kept.ended_at if kept else now) if record else None
            note = "" if summary.state.is_final else owner_note(self.home, summary.run_id)
            check, ignored = trusted(read_resume_check(record.directory) if record else None,
                                     plan.workload if plan else None, summary.attempt)
            out.append(RunListed(summary, usage, check, note, run_kind(self.home, summary), ignored, kept))
        return out

    def kinds(self, summaries: Sequence[RunSummary]) -> list[RunKind]:
        """Each run's kind, in the order given: a probe, an interconnect test, a training run, a resume that
        trained nothing (the app's run table marks them). Reads each run's folder: call it off the UI's loop."""
        from launcher.runs.core.run_kind import run_kind

        return [run_kind(self.home, s) for s in summaries]

    def count(self, *, state: str | None = None, experiment: str | None = None, matching: str = "") -> int:
        """How many runs :meth:`list` would give without a limit (a list shows a window; this says of how
        many)."""
        return self._store().count_runs(state=state, experiment=experiment, matching=matching)

    def delete(self, run_id: str) -> None:
        """Forget an ended run: its record and its folder here (``LookupError``: no such run;
        ``ValueError``: it has not ended)."""
        self._store().delete_run(run_id)

    # -- reading one run --------------------------------------------------------------------------

    def follow(self, run_id: str, *, tail_bytes: int | None | Literal["replay"] = "replay",
               keep_colour: bool = False, adopt: bool = True) -> AsyncIterator[RunEvent]:
        """The run's events until it has finished (its :class:`~launcher.events.RunFinished` last), replaying
        its record first (the last ``tail_bytes`` of each log; ``replay``: the follower's own window, a few
        MB; ``None``: all of it). Log lines come sanitised;
        ``keep_colour`` keeps their SGR colours (a terminal's, not a ``Log`` pane's). A live run without an
        owner is adopted unless ``adopt`` is false. :class:`FollowGaveUp` when its owner cannot be kept alive."""
        from launcher.runs.read.follower import REPLAY_TAIL_BYTES, follow_run

        tail = REPLAY_TAIL_BYTES if tail_bytes == "replay" else tail_bytes
        return follow_run(self.home, run_id, tail_bytes=tail, keep_colour=keep_colour, adopt=adopt)

    # -- acting on runs ---------------------------------------------------------------------------

    def adopt(self) -> list[str]:
        """Every live run without an owner gets one (a run whose owner died is caught up and finished); an
        ended run with something unsent to MLflow gets a sender. What a front end calls before showing
        runs; the runs adopted."""
        from launcher.runs.adoption import adopt_orphans_of

        return adopt_orphans_of(self.home)

    def dry_run(self, plan: RunPlan, *, ask_nodes: bool = False) -> DryRun:
        """The dry run of ``plan`` as the backend that will run it sees it; with ``ask_nodes``, where
        ``output_dir`` lands on the nodes too (``launcher.backends.NodeError`` when they cannot say)."""
        from launcher.runs.launch import plan_dry_run

        return plan_dry_run(plan, ask_nodes=ask_nodes)

    @staticmethod
    def fit(plan: RunPlan) -> PlanFit:
        """Each rank's predicted peak memory against the rank's memory where it is known here, and what
        would make it fit when it does not (the model's ``config.json`` alone: nothing is downloaded); or why
        nothing is predicted."""
        from launcher.workload.fit import plan_fit

        return plan_fit(plan)

    def estimate(self, plan: RunPlan) -> Estimate | None:
        """The launch's estimate of wall time, GPU-hours and cost, from this data dir's history; ``None``
        when nothing was measured yet (or the store cannot be read: an estimate is advice)."""
        from launcher.runs.core.estimates import advised_estimate

        return advised_estimate(self.home, plan)

    def launch(self, source: Path | Planned | RunPlan | Resumed, overrides: Sequence[Override] = (), *,
               force: bool = False, idempotent: bool = True) -> LaunchOutcome:
        """Launch ``source`` (a workload file planned with ``overrides``, or a plan made already: a relaunch's,
        a resume's) and answer how it went; blocks for the cheap checks (seconds: every node is reached).
        Before anything is recorded: an invalid workload, a plan with blockers, a missing secret, an
        unknown host key and (unless ``force``) the cheap checks refuse it. ``idempotent`` (default; a
        relaunch or resume is new) lets the ``idempotency_token`` answer with the earlier run.
        :class:`RecordUnwritable` when the data dir has no room for the run's record."""
        from launcher.api.launching import launch

        return launch(self.home, source, overrides, force=force, idempotent=idempotent)

    def plan_relaunch(self, run_id: str, overrides: Sequence[Override] = ()) -> Planned:
        """The plan of a new run doing what ``run_id`` did: its recorded workload with ``overrides`` on top."""
        from launcher.runs.launch import relaunch_plan

        return relaunch_plan(self.home, run_id, overrides)

    async def plan_resume(self, run_id: str, *, step: int | None = None, name: str | None = None,
                          overrides: Sequence[Override] = ()) -> Resumed:
        """A relaunch of ``run_id`` from its newest complete checkpoint (or the one of ``step``, or the folder
        ``name``), found where its whole copies are; ``LookupError`` says why there is none."""
        from launcher.runs.launch import resume_plan

        return await resume_plan(self.home, run_id, step, overrides, name)

    def relaunch_hazard(self, run_id: str) -> JobMayLive | None:
        """The SLURM job a relaunch now would start a second one beside, as it may still run (``None``: it
        would not): a SLURM run that has not ended, or one whose login node was lost before its job was
        stopped (:func:`launcher.present.relaunch.hazard_words` says so)."""
        from launcher.runs.leftovers import job_may_live

        return job_may_live(self.get(run_id))

    async def cancel(self, run_id: str, *, timeout_s: float = 120.0) -> CancelReport:
        """Ask the run's owner to cancel (adopting the run first if it has none) and wait for the outcome:
        every node's state afterwards, and the processes still alive after SIGKILL."""
        from launcher.runs.launch import cancel_run

        return await cancel_run(self.home, run_id, timeout_s=timeout_s)

    def send_tracking(self, run_id: str) -> Sent:
        """What the run's owner could not send to MLflow, sent now (blocking, each call bounded): a
        ``Sent`` with ``done`` and ``words``."""
        from launcher.paths import private_files
        from launcher.runs.launch import send_tracking

        private_files()  # a store this creates is the user's alone, as the owners' are
        return send_tracking(self.home, run_id)

    # Last in the class: inside its body ``list`` names this method, not the builtin.
    def list(self, *, state: str | None = None, experiment: str | None = None,
             limit: int | None = None, matching: str = "") -> list[RunSummary]:
        """Runs, newest first, optionally of one state or experiment, or whose id, experiment or state
        holds every word of ``matching`` (any case), at most ``limit``: the store reads no more rows than
        that (indexed), however many runs it keeps."""
        return self._store().list_runs(state=state, experiment=experiment, limit=limit, matching=matching)
