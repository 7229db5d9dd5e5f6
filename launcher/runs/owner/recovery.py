"""A node fails at 3 a.m. and the run goes on: what the run's owner does, unattended, when an attempt fails
and its triage names a node (``recovery:`` and ``compute.spares`` of the workload).

The :class:`NodeRecovery` decides whether the failure is the node's (lost, cut off, its processes killed,
its GPU gone, SLURM's NODE_FAIL: :func:`node_fault`; a failure in the user's code, a bad value or a NaN is
not, and the usual retries apply), checks a spare with the doctor (a spare that fails it is skipped, said
and counted towards its quarantine), makes the plan of the nodes that go on (a spare in the failed node's
place, the failed SLURM node excluded, or, with ``recovery.shrink``, the run without it), and keeps the
run's record of each swap until the trainer's resume check says how the run continued
(:class:`~launcher.runs.core.swaps.Swap`). Where the resumed run finds its checkpoint is
:mod:`launcher.runs.owner.resume_place`'s. The run policy composes one and does the relaunch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from launcher.backends.base import Backend, SchedulerCause
from launcher.doctor.preflight import node_refusals
from launcher.events import NodeSwapped, RunState
from launcher.runs.core import quarantine
from launcher.runs.core.layout import read_swaps, save_swaps
from launcher.runs.core.swaps import Swap, settled
from launcher.runs.core.triage import TriageReport
from launcher.runs.owner.recorder import Recorder
from launcher.words import node_at, plural
from launcher.workload.model import Recovery
from launcher.workload.plan import RunPlan
from launcher.workload.recovery import exclude_plan, shrink_plan, swap_plan, without_spares
from trainer.wire.protocol import KIND_RESUME_CHECK, MetricRecord, ResumeCheck

NODE_SIGNATURES = ("lost", "gpu_lost", "node_fail", "killed")
"""Triage signatures that name a node as the cause (``killed`` only by SIGKILL, SIGTERM or SIGHUP that
fsdp-tui did not send: a segfault is the code's)."""
_KILL_WORDS = ("SIGKILL", "SIGTERM", "SIGHUP", "Signal 9", "Signal 15", "Killed")
_KILL_CODES = (-9, -15, -1, 137, 143, 129)
RECORDS_FOR_CHECK = 50
"""Training records after a swap within which the resume check must come (the trainer sends it at the
first step); past them the swap is settled ``unchecked``."""


@dataclass(frozen=True)
class NodeFault:
    """A failed attempt's cause when it is a node: which, and why, in the triage's words."""

    rank: int
    host: str
    signature: str
    why: str
    at: float
    """When the failure was seen (the node's job ended, its link went down, its GPU vanished)."""
    scheduler_node: str = ""
    """SLURM's name of the node (what ``--exclude`` takes)."""


def node_fault(triage: TriageReport | None, host: str, at: float, cause: SchedulerCause | None = None) -> NodeFault | None:
    """The node a failed attempt's triage names as its cause, or ``None`` when the failure is not a node's
    (the code, a value, NaN, a timeout that names nobody). ``host``: node ``triage.node_rank``'s host."""
    if triage is None or triage.node_rank is None or triage.signature not in NODE_SIGNATURES:
        return None
    if triage.signature == "killed" and triage.exit_code not in _KILL_CODES \
            and not any(w in f"{triage.excerpt} {triage.scheduler}" for w in _KILL_WORDS):
        return None
    node = cause.host if cause is not None and cause.rank == triage.node_rank else ""
    return NodeFault(triage.node_rank, host, triage.signature, triage.summary, at, node)


@dataclass(frozen=True)
class Replacement:
    """The nodes that go on after a failure: their plan and backend (checked), and the swap's record so far."""

    plan: RunPlan
    backend: Backend | None
    """A backend for :attr:`plan` (the spare checked through it); ``None``: the run's own goes on (SLURM)."""
    swap: Swap
    old_rank: dict[int, int | None]
    """Each new rank's rank before (``None``: a node swapped in)."""


LOSS_REL_TOL = 1e-3
"""How close the first loss after a swap must be to the loss the same step gave before the failure to be
that loss (float rounding, another number of ranks summing in another order)."""


def own_loss(check: ResumeCheck, step: int, loss: float | None, before: dict[int, float]) -> str:
    """When the resume check differs only in its loss and the first step after the swap gave the loss that
    very step gave before the failure: words saying the jump is the run's own (empty otherwise). The check
    compares with the step before the stop and the run's noise; the owner has the unbroken run's own loss
    of that step, which settles it."""
    if not check.differs or not all(d.startswith("loss:") for d in check.differs):
        return ""
    then = before.get(step)
    if loss is None or then is None or not math.isclose(loss, then, rel_tol=LOSS_REL_TOL, abs_tol=1e-6):
        return ""
    return (f"the first step's loss {loss:.4g} is the loss step {step:,} gave before the failure ({then:.4g}): "
            "the jump the resume check saw is the run's own")


class NodeRecovery:
    """Owns the run's swaps: the decision, the spares checked, the plans of the nodes that go on, the
    failures counted towards quarantine, and each swap's record until the first step after it."""

    def __init__(self, rec: Recorder, home: Path, run_id: str, settings: Recovery, allowed: int, *,
                 checks_resume: bool = True, on_settled: Callable[[Swap], None] = lambda swap: None) -> None:
        self.rec, self.home, self.run_id, self.settings = rec, home, run_id, settings
        self.checks_resume = checks_resume
        """The run's trainer checks its resumes (the built-in one); a workload's own command resumes (or not)
        from checkpoints of its own, which nothing here can prove."""
        self.allowed = allowed
        """Swaps the run may make (``recovery.max_swaps``, or its default for the run's backend)."""
        self.on_settled = on_settled
        """Told each swap once it settled (the owner notifies the user)."""
        self.swaps: list[Swap] = read_swaps(rec.dir)
        """The run's swaps so far (an adopted run's, from its record)."""
        self.check: ResumeCheck | None = None
        """The resume check seen since the newest swap."""
        self.first: tuple[float, int, float | None] | None = None
        """When the first training step after the newest swap was recorded, its step and loss."""
        self.losses_before: dict[int, float] = {}
        """Each step's loss as recorded before the newest swap (what the unbroken run gave)."""
        self.records_since = 0
        if self.swaps:
            rec.log_shift = dict(self.swaps[-1].log_shift)
            rec.stream_shift = dict(self.swaps[-1].stream_shift)
        rec.on_records = self.took

    @property
    def pending(self) -> Swap | None:
        """The newest swap while its first step has not come."""
        return self.swaps[-1] if self.swaps and not self.swaps[-1].settled else None

    def can_act(self, plan: RunPlan) -> bool:
        """Whether a failed node could be replaced now: swaps left, and a spare, a scheduler or ``shrink``."""
        c = plan.workload.compute
        return (len(self.swaps) < self.allowed
                and (bool(c.spares) or c.slurm is not None or (self.settings.shrink and len(plan.nodes) > 1)))

    # -- the decision ------------------------------------------------------------------------------

    async def replace(self, fault: NodeFault, plan: RunPlan, say: Callable[[str], None],
                      make_backend: Callable[[RunPlan], Backend]) -> Replacement | None:
        """The nodes that go on without ``fault``'s node, a spare checked first (through a backend of
        ``make_backend``, which the nodes then keep); ``None`` (said) when there is none and the run may not
        shrink."""
        number = len(self.swaps) + 1
        base = dict(number=number, node_rank=fault.rank, failed_host=fault.scheduler_node or fault.host,
                    why=fault.why, signature=fault.signature, failed_at=fault.at, attempt=self.rec.attempt + 1,
                    failed_step=self.rec.last_train_step)
        same: dict[int, int | None] = {n.node_rank: n.node_rank for n in plan.nodes}
        if plan.workload.compute.slurm is not None:
            return self._exclude(fault, plan, base, same, say, make_backend)
        self._count(fault.host, fault.why)
        skipped: list[str] = []
        held = quarantine.quarantined(self.home)
        for spare in plan.workload.compute.spares:
            if spare in held:
                skipped.append(f"{spare}: quarantined ({held[spare].failures} failures; fsdp-tui quarantine lift {spare})")
                continue
            say(f"{node_at(fault.rank, fault.host)} failed ({fault.signature}); checking spare {spare} with the doctor")
            trial = swap_plan(without_spares(plan, [s.partition(':')[0] for s in skipped]), fault.rank, spare, number)
            backend = make_backend(trial)
            refusals = await node_refusals(backend, fault.rank, spare=True)
            if not refusals:
                swap = Swap(kind="spare", replacement=spare, skipped=tuple(skipped), **base)  # type: ignore[arg-type]
                return Replacement(trial, backend, swap, {**same, fault.rank: None})
            await backend.close()
            why = "; ".join(f"{r.check.name}: {r.check.detail}" for r in refusals)[:400]
            skipped.append(f"{spare}: doctor: {why}")
            say(f"spare {spare} skipped: it fails the doctor ({why})")
            self._count(spare, f"spare failed the doctor: {why}")
        if self.settings.shrink and len(plan.nodes) > 1:
            shrunk = shrink_plan(without_spares(plan, [s.partition(':')[0] for s in skipped]), fault.rank)
            if shrunk.problem:
                say(f"{node_at(fault.rank, fault.host)} failed and the run cannot go on without it: {shrunk.problem}")
                return None
            old = {new: (new if new < fault.rank else new + 1) for new in range(len(plan.nodes) - 1)}
            swap = Swap(kind="shrink", skipped=tuple(skipped), batch=shrunk.batch, **base)  # type: ignore[arg-type]
            return Replacement(shrunk.plan, make_backend(shrunk.plan), swap, dict(old))
        left = "; ".join(skipped)
        say(f"{node_at(fault.rank, fault.host)} failed ({fault.signature}) and no spare can take its place"
            + (f" ({left})" if left else " (compute.spares is empty or used up)"))
        return None

    def _exclude(self, fault: NodeFault, plan: RunPlan, base: dict, same: dict[int, int | None],
                 say: Callable[[str], None], make_backend: Callable[[RunPlan], Backend]) -> Replacement | None:
        """A SLURM run: the node SLURM named excluded from the next jobs, which get another in its place (or,
        with ``shrink``, one node fewer: a smaller allocation starts without waiting for a free node)."""
        node = fault.scheduler_node
        if not node:
            say(f"node {fault.rank} failed ({fault.signature}) but SLURM did not name the node: it cannot be "
                "excluded")
            return None
        excluded = exclude_plan(plan, node)
        if not (self.settings.shrink and len(plan.nodes) > 1):
            swap = Swap(kind="exclude", replacement="the next job gets another node in its place",  # type: ignore[arg-type]
                        **base)
            return Replacement(excluded, None, swap, dict(same))
        shrunk = shrink_plan(excluded, fault.rank)
        if shrunk.problem:
            say(f"{node_at(fault.rank, node)} failed and the run cannot go on without it: {shrunk.problem}")
            return None
        swap = Swap(kind="shrink", replacement=f"{node} excluded", batch=shrunk.batch, **base)  # type: ignore[arg-type]
        # Each SLURM node works in node-<rank> of the shared job folder: rank r's log goes on in its file.
        return Replacement(shrunk.plan, make_backend(shrunk.plan), swap, {r: r for r in range(len(plan.nodes) - 1)})

    def _count(self, host: str, why: str) -> None:
        """One more failure of ``host`` towards its quarantine (said when it is quarantined now)."""
        try:
            health = quarantine.count_failure(self.home, host, self.run_id, why, self.settings.quarantine_after)
        except OSError:
            return  # the data dir refuses it: the run goes on, the count is lost
        if health.failures == self.settings.quarantine_after:
            print(f"quarantined {host}: {health.words()}", flush=True)  # the owner's log

    # -- the record --------------------------------------------------------------------------------

    def begin(self, swap: Swap, plan: RunPlan, checkpoint_step: int | None, note: str,
              shift: tuple[dict[int, int], dict[str, int]]) -> Swap:
        """The swap decided and its nodes (``plan``'s) prepared: recorded, the records of the new attempt
        awaited. ``shift``: the record's shifts for the new nodes' logs and streams (:meth:`Recorder.use_nodes`)."""
        swap = replace(swap, checkpoint_step=checkpoint_step, checkpoint_note=note, log_shift=dict(shift[0]),
                       stream_shift=dict(shift[1]), hosts_after=tuple(n.host_display for n in plan.nodes))
        self.swaps.append(swap)
        self.check, self.first, self.records_since = None, None, 0
        self.losses_before = {r.step: r.loss for r in self.rec.records() if r.kind == "train" and r.loss is not None}
        self._save(swap)
        return swap

    def took(self, records: list[MetricRecord]) -> None:
        """Records of the run as they arrive: the newest swap settles with the first step after it and the
        resume check the trainer sends there (it may follow that step's record)."""
        swap = self.pending
        if swap is None:
            return
        for r in records:
            if r.kind == KIND_RESUME_CHECK:
                self.check = ResumeCheck.from_record(r) or self.check
            elif r.kind == "train":
                if self.first is None:
                    self.first = (r.time if r.time is not None else time.time(), r.step, r.loss)
                self.records_since += 1
        if self.first is None:
            return
        if (self.check is None and swap.checkpoint_step is not None and self.checks_resume
                and self.records_since < RECORDS_FOR_CHECK):
            return
        check = self.check
        verdict = check.verdict if check is not None else self._unchecked(swap)
        differs = check.differs if check is not None else ()
        note = ""
        if check is not None and verdict == "differs":
            note = own_loss(check, self.first[1], self.first[2], self.losses_before)
            if note:
                verdict, differs = ("resharded" if check.world_before != check.world_after else "verified"), ()
        done = replace(settled(swap, self.first[0], self.first[1], verdict, differs), loss_note=note)
        self.swaps[-1] = done
        self._save(done)
        self.rec.set_state(RunState.RUNNING, f"{done.state_word}: {done.words()}")
        self.on_settled(done)

    def close(self, ended: bool) -> None:
        """The run's end: a swap still waiting for its first step is settled as it stands (``ended``: the run
        succeeded, so nothing was left to train after the checkpoint it resumed from; its resume check, if
        the trainer sent one, says how it continued)."""
        swap = self.pending
        if swap is None or not ended:
            return
        check = self.check
        verdict = check.verdict if check is not None else self._unchecked(swap)
        done = settled(swap, time.time(), swap.checkpoint_step or 0, verdict, check.differs if check else ())
        self.swaps[-1] = done
        self._save(done)

    def _unchecked(self, swap: Swap) -> str:
        """The verdict of a swap whose first step came without a resume check: ``none`` for the built-in
        trainer starting again from step 0, else ``unchecked``."""
        return "none" if self.checks_resume and swap.checkpoint_step is None else "unchecked"

    def _save(self, swap: Swap) -> None:
        self.rec.write(save_swaps, self.rec.dir, list(self.swaps))
        self.rec.emit(NodeSwapped(self.run_id, swap))

    def words(self) -> str:
        """``1 swap: node 1 (h1) killed ...`` for the run's state; empty without one."""
        if not self.swaps:
            return ""
        return f"{plural(len(self.swaps), 'swap')}: {self.swaps[-1].words()}"

