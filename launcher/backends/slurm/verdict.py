"""How one node of a SLURM run is doing, judged from its task's record and the job's place in SLURM's
queue. Pure: the backend asks, this decides (tested on recorded ``squeue`` rows)."""

from __future__ import annotations

from launcher.backends.base import NodeStatus
from launcher.backends.slurm.queue import QueueEntry
from launcher.backends.slurm.said import never_clears

START_BOUND_S = 90.0
"""How long a node's task may go without recording a start once its job runs: it starts in seconds (the
venv is built after the record), so a task silent this long could not start (a ``job_dir`` the node
cannot see, a missing interpreter)."""


def judge(node: NodeStatus, attempt: int | None, job_id: str, entry: QueueEntry | None,
          cancelled_here: bool, active_for_s: float | None = None) -> NodeStatus:
    """One node's status from its own record and the job's place in SLURM's queue. The node's record of
    this attempt is newer than any queue view (shared by every owner, a few seconds old): it wins.
    ``active_for_s``: how long the job has had its nodes, as far as this owner has seen."""
    rank = node.rank
    mine = node.attempt == attempt and node.state != "absent"
    ended = entry is None or entry.ended
    requeued = _requeued(node, attempt, entry, cancelled_here)
    if requeued:
        return NodeStatus(rank, "exited", attempt, node.exit_code, supervisor_alive=False, requeued=requeued)
    if mine and node.state == "exited":
        if _by_signal(node) and not node.resubmit and not cancelled_here and not ended:
            # Its task was sent SIGTERM by SLURM: an scancel from elsewhere, the time limit, srun ending the
            # job for another node, a requeue. The queue says which within seconds; until then the job
            # counts as still running.
            return NodeStatus(rank, "running", attempt, supervisor_alive=True)
        return _ended(node, entry if entry is not None and entry.ended else None, cancelled_here)
    if mine and not ended:
        return NodeStatus(rank, node.state, attempt, supervisor_alive=True)
    if entry is not None and entry.waiting:
        meaning = never_clears(entry.reason)
        if meaning is not None:
            return NodeStatus(rank, "exited", attempt, None, supervisor_alive=False,
                              error=f"SLURM will never start job {job_id}: it waits on {entry.reason} ({meaning}); "
                                    "change compute.slurm and launch again (fsdp-tui doctor checks the limits)")
        return NodeStatus(rank, "starting", attempt, supervisor_alive=True, queued=queued_words(entry))
    if entry is not None and entry.active:
        if active_for_s is not None and active_for_s > START_BOUND_S:
            return NodeStatus(rank, "exited", attempt, None, supervisor_alive=False,
                              error=f"node {rank}'s task recorded no start within {START_BOUND_S:.0f} s of SLURM job "
                                    f"{job_id} starting (is job_dir shared with every compute node? see "
                                    f"node-0/slurm-{job_id}.out in the run directory)")
        return NodeStatus(rank, "starting", attempt, supervisor_alive=True)
    # The job has ended (or is long out of the queue) without this node's task recording an end.
    how = entry.ended_words() if entry is not None else "is no longer in the queue"
    stopped = cancelled_here or (entry is not None and entry.state == "CANCELLED")
    return NodeStatus(rank, "exited", attempt, exit_code=None, stopped=stopped,
                      error=f"SLURM job {job_id} {how} before node {rank}'s task recorded an end "
                            f"(see node-0/slurm-{job_id}.out in the run directory)",
                      resubmit=node.resubmit if mine else "")


def _requeued(node: NodeStatus, attempt: int | None, entry: QueueEntry | None, cancelled_here: bool) -> str:
    """Whether SLURM put the attempt's job back into its queue (``scontrol requeue``, NODE_FAIL or a
    preemption with ``compute.slurm.requeue``): its task was stopped by SLURM and the job waits again, or
    the job's next run already recorded a later attempt."""
    if attempt is None or node.attempt is None or cancelled_here:
        return ""
    if node.attempt > attempt:
        return "requeued by SLURM"
    back = entry is not None and (entry.waiting or entry.state.startswith("REQUEUE"))
    if node.attempt == attempt and node.state == "exited" and _by_signal(node) and not node.resubmit and back:
        return "requeued by SLURM"
    return ""


SIGTERM_CODES = (-15, 143)
"""How a command SIGTERMed by SLURM itself ends (directly, or a shell's 128 + 15)."""


def _by_signal(node: NodeStatus) -> bool:
    """Its task was stopped by SLURM's SIGTERM (an scancel, the time limit, a requeue). SLURM signals every
    process of the step, so the command may end before the task has recorded the signal: its exit code
    says it too."""
    return node.stopped or node.exit_code in SIGTERM_CODES


def queued_words(entry: QueueEntry) -> str:
    """Why the job waits, in SLURM's words (``pending: Resources``; ``pending`` when SLURM gives none)."""
    state = entry.state.lower()
    reason = entry.reason
    if reason.lower().startswith(state):  # some reasons repeat the state
        reason = reason[len(state):].lstrip(": ")
    return f"{state}: {reason}" if reason else f"{state}, no reason given yet"


def _ended(node: NodeStatus, entry: QueueEntry | None, cancelled_here: bool) -> NodeStatus:
    state = entry.state if entry is not None else ""
    stopped = cancelled_here or state == "CANCELLED"
    error = node.error
    if entry is not None and not error and state in ("TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY") and not node.resubmit:
        error = f"the SLURM job {entry.ended_words()}"
    return NodeStatus(node.rank, "exited", node.attempt, node.exit_code, stopped and not node.resubmit,
                      supervisor_alive=False, error=error, resubmit=node.resubmit, ended_at=node.ended_at)
