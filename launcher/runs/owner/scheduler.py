"""What a scheduler (SLURM) adds to a run's story, judged from the typed statuses of the Backend protocol:
a job waiting in the queue, a job put back into it (requeued), a job stopped at its time limit after a
checkpoint (resubmitted), and the node the scheduler saw die first (the root cause of a failure).

The run policy composes one :class:`SchedulerVerdicts` and asks it; nothing here knows which backend
runs the job, so a backend without a scheduler simply never reports any of it.
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.backends.base import NodeStatus, SchedulerCause
from launcher.events import NodeState, RunState
from launcher.runs.core.triage import TriageReport, said_report, scheduler_report
from launcher.runs.owner.outcome import Outcome
from launcher.runs.owner.recorder import Recorder
from launcher.words import plural


class SchedulerVerdicts:
    """Owns what the scheduler said of the current attempt: the queue reason, a requeue, the count of
    resubmissions after a time limit."""

    def __init__(self, rec: Recorder, ranks: list[int], host_of: Callable[[int], str], max_resubmits: int) -> None:
        self.rec, self.ranks, self.host_of, self.max_resubmits = rec, ranks, host_of, max_resubmits
        self.queued: str | None = None
        """Why the attempt's job waits in the scheduler's queue, while it does."""
        self.requeue_why = ""
        """What the scheduler said when it put the attempt's job back into its queue."""
        self.resubmits = 0
        """Attempts that went on in a new submission after a scheduler's time limit (not retries)."""

    def watch_queue(self, statuses: dict[int, NodeStatus]) -> bool:
        """A job waiting in a scheduler's queue is PENDING, with the scheduler's reason; once it has its
        nodes it is RUNNING. Whether it got them just now (its timeout counts from then)."""
        queued = next((s.queued for s in statuses.values() if s.queued), None)
        if queued and queued != self.queued:
            for rank in self.ranks:  # a new reason is every node's: the rows say the latest
                self.rec.set_node(rank, NodeState.PENDING, detail=queued)
            self.queued = queued
            self.rec.set_state(RunState.PENDING, f"queued ({queued})")
        elif not queued and self.queued is not None and len(statuses) == len(self.ranks):
            self.queued = None
            for rank in self.ranks:
                self.rec.set_node(rank, NodeState.RUNNING)
            self.rec.set_state(RunState.RUNNING, "the job has its nodes")
            return True
        return False

    def requeued(self, statuses: dict[int, NodeStatus]) -> bool:
        """Whether the scheduler put the job back into its queue (its words are kept as they were)."""
        requeued = next((s.requeued for s in statuses.values() if s.requeued), "")
        if requeued:
            self.requeue_why = requeued  # the followers go on polling
        return bool(requeued)

    def end_requeued(self, statuses: dict[int, NodeStatus]) -> Outcome:
        """This attempt has ended (its output read to the end by the caller), and the job's next run is
        the next attempt, not this one again."""
        why = self.requeue_why
        for rank in self.ranks:
            self.rec.set_node(rank, NodeState.EXITED, statuses.get(rank, NodeStatus(rank, "absent")).exit_code, why)
        return Outcome(RunState.RETRYING, why=f"{why}; the job's next run is this attempt, resumed from the "
                                              "newest complete checkpoint where there is one")

    def resubmitted(self, resubmit: str) -> Outcome:
        """The job stopped at its ``resubmit`` (a time limit) after saving a checkpoint: it goes on in a new
        submission while ``max_resubmits`` allows, else the run has timed out, resumable."""
        if self.resubmits < self.max_resubmits:
            return Outcome(RunState.RETRYING, why=f"the job stopped at its {resubmit} after saving a checkpoint; "
                                                  "resubmitted, it resumes from there")
        why = (f"the job stopped at its {resubmit} after saving a checkpoint, and {plural(self.resubmits, 'resubmission')} "
               "were all that compute.slurm.max_resubmits allows: resume it to go on")
        triage = said_report(why, "time_limit")
        self.rec.write_triage(triage)
        return Outcome(RunState.TIMED_OUT, triage=triage)

    def cause_triage(self, from_logs: TriageReport, cause: SchedulerCause,
                     exit_codes: dict[int, int | None]) -> TriageReport:
        """The scheduler saw which node died first: that node is the root cause, in its words; what the
        logs blamed on another node (a survivor's "connection closed by peer") is its consequence."""
        host = self.host_of(cause.rank) if cause.rank is not None else cause.host
        triage = scheduler_report(from_logs, cause, host, None if cause.rank is None else exit_codes.get(cause.rank))
        self.rec.write_triage(triage)
        return triage
