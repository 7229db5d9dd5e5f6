"""The run policy: prepare, start, watch, retry, time out, cancel, and stop every node when one fails.

It asks only the :class:`~launcher.backends.base.Backend` protocol and writes only through the
:class:`~launcher.runs.owner.recorder.Recorder`, so it is tested against a fake backend in milliseconds.
Each node is followed on its own (log, metrics on node 0, status, GPUs): a node that is reconnecting
holds up only itself; a node whose link is lost fails the run, named. How an attempt ends (the stop its
verdict asks, each node's exit, the failure's triage) is :mod:`~launcher.runs.owner.attempt_end`'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from launcher.backends.base import Backend, LinkState, LinkWatcher, NodeError, NodeLost, NodeStatus
from launcher.doctor.preflight import preflight
from launcher.events import NodeState, RunState
from launcher.runs.core.space import RecordUnwritable
from launcher.runs.core.triage import TriageReport, reason_signature, said_report
from launcher.runs.owner.attempt_end import end_attempt, exited_nodes, failure_triage
from launcher.runs.owner.keeper import CheckpointKeeper
from launcher.runs.owner.node_readers import NodeFollowing
from launcher.runs.owner.outcome import LaunchFailed, Outcome
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.recovery import NodeRecovery
from launcher.runs.owner.rendezvous import PortMoves, claim_port
from launcher.runs.owner.scheduler import SchedulerVerdicts
from launcher.runs.owner.settings import Settings
from launcher.runs.owner.stall import StallVerdicts
from launcher.runs.owner.swapping import recover, stop_after_lost
from launcher.workload.plan import RunPlan


class RunPolicy:
    """Owns one run's attempts from launch to end: starting each, judging the nodes' statuses, retries,
    the timeout, a cancel, and stopping every node when one fails. What a scheduler says, what a stall
    says, a taken port and the checkpoints are the composed parts' (:class:`SchedulerVerdicts`,
    :class:`StallVerdicts`, :class:`PortMoves`, :class:`CheckpointKeeper`)."""

    def __init__(self, backend: Backend, rec: Recorder, settings: Settings, *,
                 secrets: Callable[[], dict[str, str]], cancel_requested: Callable[[], bool],
                 stacks_requested: Callable[[], bool] = lambda: False,
                 on_plan: Callable[[RunPlan], None] = lambda plan: None,
                 clock: Callable[[], float] = time.monotonic, keeper: CheckpointKeeper | None = None,
                 recovery: NodeRecovery | None = None,
                 make_backend: Callable[[RunPlan, LinkWatcher], Backend] | None = None) -> None:
        self.backend, self.rec, self.settings = backend, rec, settings
        self.keeper = keeper
        """Where the checkpoints land, their gathers beside each attempt, the copy a resume needs."""
        self.recovery = recovery
        """A failed node replaced (a spare, an excluded SLURM node, the run shrunk), unattended; ``None``: never."""
        self.make_backend = make_backend
        """A backend for other nodes of the run (a swap's), told of its links as the run's own is."""
        self.failed_at: dict[int, float] = {}
        """When each failed node of the attempt was seen failing (its job's end, its link down, its GPU gone)."""
        self.stacks_requested = stacks_requested
        self.on_plan = on_plan
        """Told the plan once it is final (node 0's address resolved, the rendezvous port claimed)."""
        self.stalls = StallVerdicts(rec, settings.stall_factor, settings.stall_min_s)
        """Steps that stopped: the words, the stack dumps, the triage."""
        self.secrets, self.cancel_requested, self.clock = secrets, cancel_requested, clock
        self.ranks = [n.node_rank for n in backend.plan.nodes]
        self.following = NodeFollowing(backend, rec, settings, clock, self.ranks)
        """A follower per node (output, status, GPUs), and which nodes were lost, came back or are gone."""
        self.exit_codes: dict[int, int | None] = {}
        self.started = False
        self.orphan: NodeStatus | None = None
        """The node judged orphaned (recorded as running, nothing records it), as it was judged."""
        self.start_error: NodeError | None = None
        """Why the last attempt could not start on every node (naming the node, where it was one)."""
        self.node_error: tuple[int, str] | None = None
        """The first node whose agent said why its job ended (e.g. its disk filled): rank and words."""
        self.deadline: float | None = None
        """When the attempt times out (``timeout_minutes``), counted from when its job has its nodes."""
        self.scheduler = SchedulerVerdicts(rec, self.ranks, lambda rank: self.backend.plan.nodes[rank].host_display,
                                           settings.max_resubmits)
        """Queue, requeue and time-limit verdicts, and the scheduler's root cause of a failure."""
        self.ended_at: float | None = None
        """When an adopted attempt's job had ended (by the nodes' clocks): the run's end, not the adoption."""
        self.adopted_at: float | None = None
        self.reconnecting: set[int] = set()
        """Nodes whose link is down right now: their steps cannot be seen, so no rank is called hung."""
        self.port = PortMoves(backend, rec, lambda: on_plan(self.backend.plan))
        """The rendezvous port moved once when it is found taken (not counted as a retry)."""

    # -- links: reconnects and losses surface as node states ---------------------------------------

    def new_backend(self, plan: RunPlan) -> Backend:
        """A backend for ``plan`` (a swap's nodes) whose links are heard once it is the run's backend."""
        assert self.make_backend is not None  # a policy that recovers is given one
        made: list[Backend] = []

        def watch(rank: int, state: LinkState, detail: str) -> None:
            if made and made[0] is self.backend:
                self.on_link(rank, state, detail)
        made.append(self.make_backend(plan, watch))
        return made[0]

    def on_link(self, rank: int, state: LinkState, detail: str) -> None:
        node = {LinkState.OK: NodeState.RUNNING, LinkState.RECONNECTING: NodeState.RECONNECTING,
                LinkState.LOST: NodeState.LOST}[state]
        if state == LinkState.LOST:
            self.following.lost[rank] = detail
        if state == LinkState.RECONNECTING:
            self.reconnecting.add(rank)
            self.failed_at.setdefault(rank, time.time())  # if it is lost, this is when
        else:
            if state == LinkState.OK and rank in self.reconnecting:
                self.following.reconnected.add(rank)  # back: whether its job still runs is asked next
            self.reconnecting.discard(rank)
        self.rec.set_node(rank, node, detail=detail)

    # -- the whole run -----------------------------------------------------------------------------

    async def run(self, *, adopted: bool = False, restart: bool = False) -> Outcome:
        """The run to its end. ``adopted``: its job runs already, follow it. ``restart``: an owner died
        between two attempts; start the next one (the nodes were prepared)."""
        try:
            if (restart or adopted) and self.keeper is not None:
                self.keeper.use(self.backend.plan)  # the place its launch found, from the record
            if restart:
                await self.backend.locate()
            elif not adopted:
                await self._launch()
                if self.cancel_requested():  # asked for while the nodes were prepared: nothing to stop yet
                    self.rec.set_state(RunState.CANCELLED, "cancelled before its job started")
                    return Outcome(RunState.CANCELLED)
            while True:
                try:
                    outcome = await self._attempt(adopted)
                except NodeLost as err:
                    if self.recovery is None or not self.recovery.can_act(self.backend.plan):
                        raise
                    outcome = await stop_after_lost(self, err)
                adopted = False
                if outcome.state == RunState.FAILED and await self.port.moved_after_race(self.exit_codes.get(0)):
                    continue  # a new attempt on another port: the job found its port taken
                if outcome.state == RunState.FAILED and self.recovery is not None and await recover(self, outcome):
                    continue  # a new attempt on the nodes that go on: not counted as a retry
                if outcome.why == "lost":
                    raise NodeLost(outcome.triage.said if outcome.triage else "a node was lost")
                if outcome.state == RunState.RETRYING:  # a scheduler's time limit: it goes on from a checkpoint
                    self.scheduler.resubmits += 1
                    self.rec.attempt += 1
                    self.rec.set_state(RunState.RETRYING, f"attempt {self.rec.attempt}: {outcome.why}")
                    continue
                resubmits = self.scheduler.resubmits + self.port.attempts + self.swaps
                if outcome.state != RunState.FAILED or self.rec.attempt - resubmits > self.settings.max_retries:
                    break
                self.rec.attempt += 1
                self.rec.set_state(RunState.RETRYING,
                                   f"attempt {self.rec.attempt} of {self.settings.max_retries + 1 + resubmits}")
            if outcome.state == RunState.FAILED:
                triage = self.triage()
                cause = await self.backend.scheduler_cause()
                if cause is not None:
                    triage = self.scheduler.cause_triage(triage, cause, self.exit_codes)
                if triage.signature is None and self.start_error:
                    return await self._fail(str(self.start_error), self.start_error.node_rank)
                if self.stalls.stalled and triage.signature in (None, "killed"):
                    triage = self.stalls.triage()
                return Outcome(outcome.state, outcome.exit_code, triage)
            if self.stalls.stalled and outcome.state in (RunState.CANCELLED, RunState.TIMED_OUT):
                return Outcome(outcome.state, outcome.exit_code, self.stalls.triage())
            return outcome
        except (LaunchFailed, NodeError, RecordUnwritable) as err:
            return await self._fail(str(err), getattr(err, "node_rank", None))

    @property
    def swaps(self) -> int:
        """Attempts that began on other nodes after a node failed (not counted as retries)."""
        return len(self.recovery.swaps) if self.recovery is not None else 0

    def say(self, text: str) -> None:
        """A line in the run's state, keeping the state it is in."""
        self.rec.set_state(self.rec.last_state or RunState.RUNNING, text)

    async def _fail(self, why: str, node_rank: int | None = None) -> Outcome:
        """The run cannot go on: say why, and stop whatever had started."""
        self.rec.set_state(RunState.FAILED, why)
        if self.started:
            await self.stop_all()
        triage = said_report(why, reason_signature(why), node_rank)
        for rank, detail in self.following.lost.items():  # a lost node is the cause the user can act on
            triage = TriageReport(node_rank=rank, signature="lost", excerpt=detail, said=why)
            break
        self.rec.write_triage(triage)
        return Outcome(RunState.FAILED, None, triage)

    async def _launch(self) -> None:
        self.rec.set_state(RunState.PREFLIGHT, "preparing the nodes")
        self.secrets()  # a missing secret fails before anything is shipped
        await self.backend.locate()
        if self.cancel_requested():
            return
        await self.backend.prepare()
        if self.cancel_requested():
            return
        if self.keeper is not None:
            self.backend.use_plan(await self.keeper.locate(self.backend))
            self.keeper.use(self.backend.plan)
        # Forced or not: a forced run records what it went past. Checked by the launch: nothing to find again.
        refusals = [] if self.settings.checked else await preflight(self.backend)
        if refusals and self.settings.preflight:
            raise LaunchFailed("not started, it cannot run there: " + "; ".join(map(str, refusals))
                               + " (fsdp-tui doctor shows every check; --force launches anyway)")
        if refusals:
            self.rec.note_forced([str(r) for r in refusals])
        await claim_port(self.backend, self.rec)
        self.on_plan(self.backend.plan)

    # -- one attempt -------------------------------------------------------------------------------

    async def _attempt(self, adopted: bool) -> Outcome:
        self.exit_codes.clear()
        self.failed_at.clear()
        self.following.new_attempt()
        if adopted:
            self.started = True
            self.adopted_at = time.time()
            self.rec.set_state(RunState.RUNNING, "re-attached: its previous owner stopped")
        else:
            self.rec.set_state(RunState.STARTING)
            for rank in self.ranks:
                self.rec.set_node(rank, NodeState.STARTING)
            self.started = True
            try:
                if self.keeper is not None:
                    await self.keeper.before_attempt(self.rec.attempt, self.backend)
                await self.port.start(lambda: self.backend.start(self.secrets(), self.rec.attempt))
            except NodeError as err:
                self.start_error = err
                await self.stop_all()
                self.rec.set_state(RunState.FAILED, str(err))
                return Outcome(RunState.FAILED)
            first = await self.backend.status(0)
            if first.queued:
                self._watch_queue({0: first})
            else:
                for rank in self.ranks:
                    self.rec.set_node(rank, NodeState.RUNNING)
                self.rec.set_state(RunState.RUNNING)
        self.deadline = self.clock() + self.settings.timeout_s if self.settings.timeout_s else None
        self.following.unfollowing.clear()
        followers = [asyncio.create_task(self.following.follow(rank)) for rank in self.ranks]
        if self.keeper is not None:
            self.keeper.start()
        try:
            try:
                outcome = await self._watch(followers)
            finally:
                self.following.unfollowing.set()
                await asyncio.gather(*followers, return_exceptions=True)
            return await end_attempt(self, outcome)
        finally:
            if self.keeper is not None:
                await self.keeper.settle(set(self.following.lost))  # the attempt's last saves made whole

    async def _watch(self, followers: list[asyncio.Task]) -> str:
        """Judge the nodes' latest statuses until the attempt ends; says how."""
        while True:
            for task in followers:
                lost = task.exception() if task.done() else None
                if lost is not None:
                    raise lost  # a node was lost: the run fails and every node is stopped
            self.rec.check_room()  # the operator's disk: stop while the run's end can still be written
            self._watch_queue(self.following.statuses)
            self.stalls.saw_progress(self.clock(), bool(self.reconnecting))
            if self.stacks_requested() or self.stalls.dump_due:
                await self.stalls.dump_stacks(self.backend, [r for r in self.ranks if r not in self.following.lost])
            verdict = self._judge(self.deadline)
            if verdict == "orphaned" and not await self._still_orphaned():
                verdict = None
            if verdict is not None:
                return verdict
            self.following.polled.clear()
            try:
                await asyncio.wait_for(self.following.polled.wait(), self.settings.poll_s)
            except asyncio.TimeoutError:
                pass

    def _judge(self, deadline: float | None) -> str | None:
        if self.scheduler.requeued(self.following.statuses):
            return "requeued"
        exited = exited_nodes(self)
        if self.cancel_requested() or any(s.stopped for s in exited.values()):
            return "cancel"
        for status in self.following.statuses.values():
            if status.orphaned or (status.state == "absent" and status.attempt is None):
                self.orphan = status
                return "orphaned"
        if self.following.gpu_lost:
            return "gpu_lost"
        if len(exited) == len(self.ranks) or any(s.exit_code != 0 for s in exited.values()):
            return "exited"
        if deadline is not None and self.scheduler.queued is None and self.clock() > deadline:
            return "timeout"
        return None

    def _watch_queue(self, statuses: dict[int, NodeStatus]) -> None:
        """The scheduler's queue, said; the timeout counts from when the job has its nodes."""
        if self.scheduler.watch_queue(statuses) and self.settings.timeout_s:
            self.deadline = self.clock() + self.settings.timeout_s

    async def _still_orphaned(self) -> bool:
        """Asked again, a moment later: the node still records a job that nothing records."""
        orphan = self.orphan
        assert orphan is not None  # _judge named it with its "orphaned" verdict
        await asyncio.sleep(self.settings.poll_s)
        again = await self.backend.status(orphan.rank)
        self.following.statuses[orphan.rank] = again
        if again.orphaned or (again.state == "absent" and again.attempt is None):
            print(f"judged orphaned: {orphan} then {again}", flush=True)  # the owner's log
            self.orphan = again
            return True
        return False

    # -- stopping and triage -----------------------------------------------------------------------

    async def stop_all(self) -> None:
        outcomes = await self.backend.stop(self.settings.stop_grace_s)
        for out in outcomes:
            if out.rank in self.exit_codes:
                continue  # it had exited by itself: keep its exit code
            if out.rank in self.following.lost:
                self.rec.set_node(out.rank, NodeState.LOST, detail=self.following.lost[out.rank])
                continue
            detail = f"processes left: {list(out.left)}" if out.left else out.error
            self.rec.set_node(out.rank, NodeState.STOPPED, detail=detail)

    def triage(self) -> TriageReport:
        """Why the attempt failed (:func:`~launcher.runs.owner.attempt_end.failure_triage`)."""
        return failure_triage(self)

    async def stop_everything(self) -> None:
        """Used when the owner itself must give up (a bug): leave no job behind."""
        if self.started:
            await self.stop_all()
