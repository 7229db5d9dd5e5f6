"""Which run a launch continues, said before it starts and kept with the run.

A run continues another when it resumes from that run's checkpoint: ``fsdp-tui resume`` (and the
checkpoints screen's ``r``) name it; a launch whose ``checkpoint.resume: auto`` finds another run's
newest whole checkpoint in a fixed ``output_dir`` (a relaunch of the same workload) continues that run too.
Either way the launch says so before anything starts (the run, its step), records the run it continues
in the new run's lineage (``checkpoint.resume_runs``: the trainer reads only its own checkpoints and its
lineage's, :mod:`trainer.wire.ckpt_owner`) and in its launch options, and refuses a continuation that
leaves nothing to train (the run it would continue trained every step this one would): ``--fresh`` starts
afresh instead, ``--set parameters.max_steps=N`` trains further. ``show``, ``runs`` and the monitor say
what a run continued, and a run that trained nothing is said so, never a bare ``succeeded``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from launcher.runs.core.continuation import FRESH as FRESH
from launcher.runs.core.continuation import OPTION as OPTION
from launcher.runs.core.continuation import TRAINED_NOTHING as TRAINED_NOTHING
from launcher.runs.core.continuation import Continuation as Continuation
from launcher.words import plural
from launcher.workload.plan import RunPlan, build_plan
from trainer.wire.ckpt_owner import auto_continues, private_folder


def max_steps_of(plan: RunPlan) -> int | None:
    value = plan.workload.parameters.get("max_steps")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def resume_setting(plan: RunPlan) -> str:
    ckpt = plan.workload.parameters.get("checkpoint")
    value = ckpt.get("resume", "auto") if isinstance(ckpt, dict) else "auto"
    return value if isinstance(value, str) else "auto"


def auto_may_continue(plan: RunPlan) -> bool:
    """Whether the plan's ``resume: auto`` could find another run's checkpoint: the built-in trainer, a
    fixed ``output_dir`` (a folder of its own holds nothing of another run's at the start)."""
    out = plan.output_dir
    return (plan.uses_builtin_trainer and out is not None and not private_folder(out)
            and resume_setting(plan) == "auto")


def continued_by(plan: RunPlan, checkpoints) -> Continuation | None:
    """What ``resume: auto`` would continue among ``checkpoints`` (node 0's folder as the job will see it):
    the folder's newest whole checkpoint when it is another run's; ``None`` when it is none or the run's
    own (a retry's), or names no run (the trainer reads none of those: it starts afresh)."""
    newest = auto_continues(list(checkpoints), plan.run_id)
    if newest is None or newest.run_id is None:
        return None
    return Continuation(newest.run_id, newest.name, newest.step, max_steps_of(plan), auto=True)


def with_lineage(plan: RunPlan, runs: list[str]) -> RunPlan:
    """``plan`` whose trainer may read the checkpoints of ``runs`` (``checkpoint.resume_runs``), the same
    run otherwise (its id, node root and place)."""
    params = dict(plan.workload.parameters)
    ckpt = dict(params.get("checkpoint") or {})
    before = [r for r in ckpt.get("resume_runs") or [] if isinstance(r, str)]
    ckpt["resume_runs"] = list(dict.fromkeys([*runs, *before]))
    params["checkpoint"] = ckpt
    workload = plan.workload.model_copy(update={"parameters": params})
    rebuilt = build_plan(workload, run_id=plan.run_id, source_file=plan.source_file, master_port=plan.master_port,
                         node_root=plan.node_root)
    return replace(rebuilt, ckpt_place=plan.ckpt_place)


def lineage_runs(home: Path, run_id: str) -> list[str]:
    """``run_id`` and the runs it continued (its recorded ``checkpoint.resume_runs``), newest first."""
    from launcher.paths import run_dir
    from launcher.runs.core.layout import read_plan

    plan = read_plan(run_dir(home, run_id))  # as recorded: the plan is not validated again
    return [run_id, *(r for r in (plan.resume_runs if plan is not None else ()) if r != run_id)]


def recorded(directory: Path) -> Continuation | None:
    """What the run continued, as its launch recorded it (``None``: it continued no run)."""
    from launcher.runs.core.layout import read_options

    return read_options(directory).continues


def trained_nothing(directory: Path, max_steps: int | None) -> str:
    """The words for a run that ended without a training step: what it continued and why nothing was left."""
    found = recorded(directory)
    if found is None:
        return f"{TRAINED_NOTHING}: its job ended before a training step"
    left = f", and the run is {plural(max_steps, 'step')} long: nothing left to train" if max_steps else ""
    return f"{TRAINED_NOTHING}: it continued run {found.run_id} at its step {found.step} ({found.name}){left}"
