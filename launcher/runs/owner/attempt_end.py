"""How an attempt of the run policy ends: the verdict's stop (a cancel, the timeout, a lost GPU, a node
without its job, a requeue, the jobs' exits), every node's output read to its end, and the failure's triage
(:func:`failure_triage`: what the logs say, unless a node is to blame first).

The policy is asked through :class:`Ending` (what of it these steps read and set), so this module needs
nothing of the policy's own."""

from __future__ import annotations

import time
from typing import Protocol

from launcher.backends.base import Backend, NodeStatus
from launcher.events import NodeState, RunState
from launcher.runs.core.triage import (
    TriageReport,
    died_first,
    gone_report,
    gpu_lost_report,
    lost_first,
    node_error_report,
    triage_run,
)
from launcher.runs.owner.keeper import CheckpointKeeper
from launcher.runs.owner.node_readers import NodeFollowing
from launcher.runs.owner.outcome import LaunchFailed, Outcome
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.scheduler import SchedulerVerdicts
from launcher.words import node_at


class Ending(Protocol):
    """What of the run policy an attempt's end reads and sets (:class:`~launcher.runs.owner.policy.RunPolicy`)."""

    backend: Backend
    rec: Recorder
    following: NodeFollowing
    scheduler: SchedulerVerdicts
    keeper: CheckpointKeeper | None
    exit_codes: dict[int, int | None]
    failed_at: dict[int, float]
    node_error: tuple[int, str] | None
    orphan: NodeStatus | None
    adopted_at: float | None
    ended_at: float | None

    async def stop_all(self) -> None: ...


def exited_nodes(policy: Ending) -> dict[int, NodeStatus]:
    """The nodes whose job of this attempt has exited, with their statuses."""
    return {rank: s for rank, s in policy.following.statuses.items()
            if s.state == "exited" and s.attempt == policy.rec.attempt}


async def end_attempt(policy: Ending, outcome: str) -> Outcome:
    """Stop what must stop and read every node's output to its end."""
    if outcome == "cancel":
        policy.rec.set_state(RunState.CANCELLING)
        await policy.stop_all()
        await policy.following.pump_all()
        return Outcome(RunState.CANCELLED)
    if outcome == "timeout":
        await policy.stop_all()
        await policy.following.pump_all()
        return Outcome(RunState.TIMED_OUT)
    if outcome == "orphaned":
        return await _orphaned(policy)
    if outcome == "gpu_lost":  # the job may run on (or hang): the node is stopped with the others
        rank = min(policy.following.gpu_lost)
        policy.failed_at.setdefault(rank, time.time())
        host = policy.backend.plan.nodes[rank].host_display
        policy.rec.set_state(RunState.RUNNING, f"stopping: {node_at(rank, host)} {policy.following.gpu_lost[rank]}")
        await policy.stop_all()
        await policy.following.pump_all()
        return Outcome(RunState.FAILED)
    if outcome == "requeued":
        return await _requeued(policy)
    exited = exited_nodes(policy)
    failed = {r: s for r, s in exited.items() if s.exit_code != 0}
    if failed:
        for rank in await policy.following.poll_the_others(exited):  # which node ended first: the first question
            policy.exit_codes[rank] = None
        exited = exited_nodes(policy)
        failed = {r: s for r, s in exited.items() if s.exit_code != 0}
    ends = [s.ended_at for s in exited.values() if s.ended_at is not None]
    if policy.adopted_at is not None and ends and len(ends) == len(exited) and max(ends) <= policy.adopted_at:
        policy.ended_at = max(ends)  # it had ended before this owner came: that is when the run ended
    for rank, s in exited.items():
        if s.exit_code != 0:
            policy.failed_at.setdefault(rank, s.ended_at or time.time())
        policy.exit_codes[rank] = s.exit_code
        policy.rec.set_node(rank, NodeState.EXITED, s.exit_code, s.error)
        if s.error and policy.node_error is None:
            policy.node_error = (rank, s.error)
    resubmit = next((s.resubmit for s in exited.values() if s.resubmit), "")
    if failed:  # said before the stop, which may take a while (a scheduler's job completing)
        # No recorded end: it died; a SIGTERM (-15, 143) is more likely the stop of a survivor.
        dead = min(failed, key=lambda r: (failed[r].exit_code is not None, failed[r].exit_code in (-15, 143), r))
        code = failed[dead].exit_code
        how = "died" if code is None else f"exited with code {code}"
        if policy.following.gone:  # a node whose job vanished is why the others failed
            dead = min(policy.following.gone)
            how = policy.following.gone[dead]
        policy.rec.set_state(RunState.RUNNING,
                             f"stopping: {node_at(dead, policy.backend.plan.nodes[dead].host_display)} " + how)
    if failed or resubmit:
        await policy.stop_all()
    await policy.following.pump_all()
    if resubmit:
        return policy.scheduler.resubmitted(resubmit)
    if not failed:
        return Outcome(RunState.SUCCEEDED, 0)
    return Outcome(RunState.FAILED, failed[min(failed)].exit_code)


async def _requeued(policy: Ending) -> Outcome:
    """The scheduler put the job back into its queue: this attempt's output is read to its end."""
    await policy.following.pump_all()
    return policy.scheduler.end_requeued(policy.following.statuses)


async def _orphaned(policy: Ending) -> Outcome:
    """A node records its job as running but nothing there records it any more (its disk filled,
    or the node-side supervisor was killed): that node has failed."""
    s = policy.orphan
    assert s is not None  # _judge named it with its "orphaned" verdict
    if s.rank in policy.following.reconnected and not s.error:  # back without its job: the node restarted
        policy.following.mark_gone(s.rank, s)
        policy.exit_codes[s.rank] = None
        await policy.stop_all()
        await policy.following.pump_all()
        return Outcome(RunState.FAILED)
    why = s.error or ("no job was recorded there (the launch was interrupted before it started)"
                      if s.state == "absent" else "the process recording its job on the node died")
    policy.exit_codes[s.rank] = None
    policy.rec.set_node(s.rank, NodeState.EXITED, None, why)
    await policy.stop_all()
    await policy.following.pump_all()
    raise LaunchFailed(f"{node_at(s.rank, policy.backend.plan.nodes[s.rank].host_display)}: {why}", s.rank)


def failure_triage(policy: Ending) -> TriageReport:
    """Why the attempt failed: what the logs say, unless a node was found without its job or lost during a
    checkpoint's gather (it is named first, the logs' verdict its consequence) or a node's agent saw the
    cause itself (its disk)."""
    report = triage_run(policy.rec.node_logs(), dict(policy.exit_codes),
                        first=died_first(policy.exit_codes, policy.failed_at))
    nodes = policy.backend.plan.nodes
    if policy.following.gpu_lost:
        rank = min(policy.following.gpu_lost)
        report = gpu_lost_report(report, rank, nodes[rank].host_display, policy.following.gpu_lost[rank])
    elif policy.following.gone:
        rank = min(policy.following.gone)
        report = gone_report(report, rank, nodes[rank].host_display, policy.following.gone[rank])
    elif policy.node_error is not None:
        rank, error = policy.node_error
        report = node_error_report(report, rank, nodes[rank].host_display, error, policy.exit_codes.get(rank))
    if policy.keeper is not None:  # a node the gathers lost (they are done by now) before what it set off
        report = lost_first(report, policy.keeper.lost_in_gathers(), {n.node_rank: n.host_display for n in nodes})
    policy.rec.write_triage(report)
    return report
