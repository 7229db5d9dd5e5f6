"""What the run policy does when an attempt failed and a node may be to blame: a lost node's attempt ended
(:func:`stop_after_lost`), the failure judged (:func:`recover`: a node named, a replacement found by the
:class:`~launcher.runs.owner.recovery.NodeRecovery`), and the policy moved onto the nodes that go on
(:func:`swap_nodes`): its backend replaced (the old one's links closed and no longer heard), the new node
prepared, where checkpoints land asked again, the checkpoint to resume from put in node 0's folder, the
rendezvous port claimed, and the swap recorded; then the next attempt starts as any other.

The policy is asked through :class:`Swappable` (what of it these steps use), so this module needs nothing
of the policy's own."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from launcher.backends.base import Backend, NodeError, NodeLost, NodeStatus
from launcher.events import NodeState, RunState
from launcher.runs.core.triage import TriageReport
from launcher.runs.owner.keeper import CheckpointKeeper
from launcher.runs.owner.node_readers import NodeFollowing
from launcher.runs.owner.outcome import LaunchFailed, Outcome
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.recovery import NodeFault, NodeRecovery, Replacement, node_fault
from launcher.runs.owner.rendezvous import PortMoves, claim_port
from launcher.runs.owner.resume_place import ResumePoint, newest_resumable, place_for_resume
from launcher.runs.owner.scheduler import SchedulerVerdicts
from launcher.runs.owner.settings import Settings
from launcher.runs.owner.stall import StallVerdicts
from launcher.words import node_at
from launcher.workload.plan import RunPlan


class Swappable(Protocol):
    """What of the run policy a swap reads and resets (:class:`~launcher.runs.owner.policy.RunPolicy`)."""

    backend: Backend
    rec: Recorder
    settings: Settings
    clock: Callable[[], float]
    ranks: list[int]
    following: NodeFollowing
    port: PortMoves
    stalls: StallVerdicts
    scheduler: SchedulerVerdicts
    reconnecting: set[int]
    exit_codes: dict[int, int | None]
    failed_at: dict[int, float]
    node_error: tuple[int, str] | None
    start_error: NodeError | None
    orphan: NodeStatus | None
    keeper: CheckpointKeeper | None
    recovery: NodeRecovery | None
    on_plan: Callable[[RunPlan], None]

    def new_backend(self, plan: RunPlan) -> Backend: ...

    def triage(self) -> TriageReport: ...

    def say(self, text: str) -> None: ...

    async def stop_all(self) -> None: ...


async def stop_after_lost(policy: Swappable, err: NodeLost) -> Outcome:
    """A node's link was lost and a swap may follow: the others stopped, their output read, the lost node
    named (the run fails as before when no swap follows)."""
    lost = policy.following.lost
    rank = min(lost) if lost else None
    host = policy.backend.plan.nodes[rank].host_display if rank is not None else "?"
    why = f"{node_at(rank, host)}: {lost.get(rank, str(err))}" if rank is not None else str(err)
    policy.rec.set_state(RunState.RUNNING, f"stopping: {why}")
    await policy.stop_all()
    await policy.following.pump_all()
    triage = TriageReport(node_rank=rank, signature="lost", excerpt=str(err), said=str(err))
    policy.rec.write_triage(triage)
    return Outcome(RunState.FAILED, None, triage, why="lost")


async def recover(policy: Swappable, outcome: Outcome) -> bool:
    """After a failed attempt: when its triage names a node and a spare (or the scheduler, or a shrink) can
    take its place, the run goes on there; whether it does."""
    recovery = policy.recovery
    if recovery is None or not recovery.can_act(policy.backend.plan):
        return False
    triage = outcome.triage if outcome.why == "lost" and outcome.triage else policy.triage()
    cause = await policy.backend.scheduler_cause()
    if cause is not None:
        triage = policy.scheduler.cause_triage(triage, cause, policy.exit_codes)
    rank = triage.node_rank
    nodes = policy.backend.plan.nodes
    host = nodes[rank].host_display if rank is not None and rank < len(nodes) else ""
    at = policy.failed_at.get(rank, time.time()) if rank is not None else time.time()
    fault = node_fault(triage, host, at, cause)
    if fault is None:
        return False
    replacement = await recovery.replace(fault, policy.backend.plan, policy.say, policy.new_backend)
    if replacement is None:
        return False
    await swap_nodes(policy, replacement, fault)
    return True


async def swap_nodes(policy: Swappable, r: Replacement, fault: NodeFault) -> None:
    """Carry ``policy`` on with ``r``'s nodes; ``LaunchFailed`` when they cannot be made ready (said)."""
    assert policy.recovery is not None
    rec, old = policy.rec, policy.backend.plan
    what = {"spare": f"spare {r.swap.replacement} in its place", "shrink": "the run goes on without it",
            "exclude": r.swap.replacement}[r.swap.kind]
    rec.set_state(RunState.RETRYING, f"{node_at(fault.rank, r.swap.failed_host)} failed ({fault.signature}): {what}")
    if r.backend is None:
        policy.backend.use_plan(r.plan)  # the scheduler's own: the next job's script excludes the node
    else:
        await policy.backend.close()
        policy.backend = r.backend
    backend = policy.backend
    policy.ranks[:] = [n.node_rank for n in backend.plan.nodes]
    policy.following = NodeFollowing(backend, rec, policy.settings, policy.clock, policy.ranks)
    policy.port.backend = backend
    policy.stalls = StallVerdicts(rec, policy.settings.stall_factor, policy.settings.stall_min_s)
    policy.reconnecting.clear()
    policy.exit_codes.clear()
    policy.node_error = policy.start_error = policy.orphan = None
    try:
        point = ResumePoint(None, "")
        if r.backend is not None:
            await backend.locate()
            rec.set_state(RunState.RETRYING, f"preparing {r.swap.replacement}" if r.swap.kind == "spare"
                          else "preparing the nodes that go on")
            await backend.prepare()
            if policy.keeper is not None:
                await policy.keeper.reset()
                backend.use_plan(await policy.keeper.locate(backend))
                policy.keeper.use(backend.plan)
                point = await place_for_resume(old, backend, r.old_rank, fault.rank, rec.dir, policy.keeper.here)
            await claim_port(backend, rec)
        elif policy.keeper is not None:
            listing = await backend.checkpoints(old.output_dir, 0) if old.output_dir else None
            found = newest_resumable(listing.checkpoints if listing else (), old)
            if found is not None:
                point = ResumePoint(found[0], f"{found[1]} on the cluster's shared filesystem")
    except NodeError as err:
        raise LaunchFailed(f"{node_at(fault.rank, fault.host)} failed and its replacement could not be made "
                           f"ready: {err}") from None
    policy.on_plan(backend.plan)
    nodes = [(n.node_rank, n.host_display, n.node_dir) for n in backend.plan.nodes]
    shift = rec.use_nodes(nodes, r.old_rank) if r.backend is not None else (dict(rec.log_shift),
                                                                              dict(rec.stream_shift))
    swap = policy.recovery.begin(r.swap, backend.plan, point.step, point.note, shift)
    for rank in policy.ranks:
        rec.set_node(rank, NodeState.PENDING, detail="swapped in" if r.old_rank.get(rank, rank) is None else "")
    rec.attempt += 1
    rec.set_state(RunState.RETRYING, f"attempt {rec.attempt} on other nodes: {swap.words()}")
