"""Whose word a run's resume badge is: a resume check is the trainer's record of a resume, and a job's
record alone is a node's word (any job may write one). So the badge shows a check only where the launcher
itself knows the run resumes, or may: its built-in trainer was asked for a checkpoint (``resume``, the
checkpoints screen), or resumes by itself (``checkpoint.resume: auto``) from an ``output_dir`` that can hold
one already (a retry's, or a folder other runs write). A check from any other run is ignored, and said."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer.wire.protocol import RUN_ID_ENV, ResumeCheck

if TYPE_CHECKING:
    from launcher.runs.core.layout import RecordedPlan


@dataclass(frozen=True)
class ResumeBasis:
    """What of a run's resolved workload decides whether it may have resumed (read once from its plan)."""

    on_record: bool
    """A workload was on record (a plan that holds none: nothing is known)."""
    runs_command: bool = False
    """It runs a command of its own (no built-in trainer)."""
    resume: str = "auto"
    """``parameters.checkpoint.resume`` as written (``auto``, ``never``, a checkpoint's path; a value of another
    type, which the trainer refuses, as its text)."""
    output_dir: str = ""

    @classmethod
    def of_plan(cls, plan: RecordedPlan | None) -> ResumeBasis:
        """The basis of a plan as recorded (``None``: no plan on record, nothing known)."""
        return cls.of(plan.workload if plan is not None else None)

    @classmethod
    def of(cls, workload: Mapping[str, Any] | None) -> ResumeBasis:
        if not isinstance(workload, Mapping) or not workload:
            return cls(on_record=False)
        params = _section(workload, "parameters")
        output_dir = params.get("output_dir")
        resume = _section(params, "checkpoint").get("resume", "auto")
        return cls(True, bool(workload.get("command")), resume if isinstance(resume, str) else str(resume),
                   output_dir if isinstance(output_dir, str) else "")

    def not_a_resume(self, attempt: int) -> str:
        """Why the launcher knows the run, at ``attempt``, did not resume; empty when it resumed or may have."""
        if not self.on_record:
            return "its plan is not on record"
        if self.runs_command:
            return "it runs a command of its own; only the built-in trainer resumes"
        if self.resume == "never":
            return "its parameters say checkpoint.resume: never"
        if self.resume != "auto":
            return ""  # a checkpoint named: a resume the launcher asked for
        if not self.output_dir:
            return "it has no output_dir to resume from"
        if attempt <= 1 and RUN_ID_ENV in self.output_dir:
            return "its output_dir is its own and it was its first attempt: there was nothing to resume from"
        return ""


def not_a_resume(workload: Mapping[str, Any] | None, attempt: int) -> str:
    """Why the launcher knows the run (its resolved ``workload`` from the plan, at ``attempt``) did not resume;
    empty when it resumed or may have."""
    return ResumeBasis.of(workload).not_a_resume(attempt)


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def trusted(check: ResumeCheck | None, workload: Mapping[str, Any] | None, attempt: int) -> tuple[ResumeCheck | None, str]:
    """The check the badge shows, and the words for one it ignores (empty when none was ignored)."""
    if check is None:
        return None, ""
    why = not_a_resume(workload, attempt)
    if not why:
        return check, ""
    return None, f"a resume check ({check.verdict}) from its job was ignored: the run did not resume ({why})"
