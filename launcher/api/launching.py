"""Launching, written once for both front ends: a workload file (or a plan made already) checked, refused
before anything is recorded, or handed to a new run's owner; the outcome typed. :meth:`launcher.api.runs.Runs.launch`
is the way in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from launcher.runs.core.continuing import Continuation
    from launcher.runs.launch import Resumed
    from launcher.workload.load import Planned
    from launcher.workload.overrides import Override
    from launcher.workload.plan import RunPlan

__all__ = ["AlreadyLaunched", "LaunchOutcome", "Launched", "Refused", "launch"]


@dataclass(frozen=True)
class Launched:
    """The run was recorded and its owner started: it outlives the front end that launched it."""

    run_id: str
    plan: RunPlan
    continues: Continuation | None = None
    """The run it continues (``resume``, or a ``resume: auto`` that found another run's checkpoint): say it."""


@dataclass(frozen=True)
class AlreadyLaunched:
    """The workload's ``idempotency_token`` was launched before: nothing started; ``run_id`` is that run."""

    run_id: str
    plan: RunPlan
    """The plan that was not launched (its ``run_id`` differs from :attr:`run_id`)."""

    @property
    def token(self) -> str:
        """The workload's ``idempotency_token`` that named the earlier run."""
        return self.plan.workload.idempotency_token or ""


@dataclass(frozen=True)
class Refused:
    """Nothing was launched, nor recorded; :attr:`reasons` says why, one line each."""

    stage: Literal["invalid", "blocked", "checks", "output_dir", "finished"]
    """``invalid``: the workload has errors (:attr:`planned` has them at their lines); ``blocked``: its plan
    cannot run as written; ``checks``: a missing secret, an unknown host key, or (unless forced) what the
    cheap checks refuse; ``output_dir``: another workload's run uses its ``output_dir`` on that node;
    ``finished``: its ``resume: auto`` would continue a run that trained every step it would (nothing left
    to train: ``--fresh`` starts afresh)."""
    reasons: tuple[str, ...]
    planned: Planned | None = None
    forced: bool = False
    """The launch was asked with ``force`` (``--force`` would not help then)."""


LaunchOutcome = Launched | Refused | AlreadyLaunched
"""What :meth:`Runs.launch` answers."""


def launch(home: Path, source: Path | Planned | RunPlan | Resumed, overrides: Sequence[Override] = (), *,
           force: bool = False, idempotent: bool = True) -> LaunchOutcome:
    """:meth:`launcher.api.runs.Runs.launch` in the data dir ``home``."""
    import asyncio

    from launcher.runs.core.continuing import lineage_runs, with_lineage
    from launcher.runs.core.ownership import WarmOwner
    from launcher.runs.launch import LaunchRefused, Resumed, check_room, start_run
    from launcher.runs.launch_checks import before_record
    from launcher.workload.load import Planned, plan_file

    bring, continues = None, None
    if isinstance(source, Resumed):
        source, bring, continues, idempotent = source.planned, source.bring, source.continues, False
    if isinstance(source, Path):
        source = plan_file(source, overrides, home=home)
    planned = source if isinstance(source, Planned) else None
    plan = source.plan if isinstance(source, Planned) else source
    if plan is None:
        errors = tuple(p.format() for p in planned.problems if p.is_error) if planned else ()
        return Refused("invalid", errors or ("invalid workload",), planned)
    if plan.blockers:
        return Refused("blocked", tuple(plan.blockers), planned)
    check_room(home)  # a data dir with no room says so first: the launch would stop there anyway
    warm = WarmOwner()  # the run's owner starts (its imports) while the nodes are checked
    try:
        known = continues is not None  # a resume says what it continues
        said, checked, continues = asyncio.run(before_record(plan, home, force=force, continues=continues))
        if said:
            return Refused("checks", tuple(said), planned, forced=force)
        if not known and continues is not None:
            if continues.nothing_left:
                where = f"{plan.output_dir} on {plan.nodes[0].host_display}"
                return Refused("finished", (continues.refusal(where),), planned, forced=force)
            plan = with_lineage(plan, lineage_runs(home, continues.run_id))  # that run's checkpoint, as lineage
        try:
            run_id = start_run(plan, home, force=force, idempotent=idempotent, resume_from=bring,
                               continues=continues, checked=checked, warm=warm)
        except LaunchRefused as err:
            return Refused("output_dir", (str(err),), planned, forced=force)
    finally:
        warm.discard()  # not taken (a refusal, a token launched before): it leaves
    return Launched(run_id, plan, continues) if run_id == plan.run_id else AlreadyLaunched(run_id, plan)
