"""Whose word a run's resume badge is: a resume check is the trainer's record of a resume, and a job's
record alone is a node's word (any job may write one). So the badge shows a check only where the launcher
itself knows the run resumes, or may: its built-in trainer was asked for a checkpoint (``resume``, the
checkpoints screen), or resumes by itself (``checkpoint.resume: auto``) from an ``output_dir`` that can hold
one already (a retry's, or a folder other runs write). A check from any other run is ignored, and said."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.wire.protocol import RUN_ID_ENV, ResumeCheck


def not_a_resume(workload: Mapping[str, Any] | None, attempt: int) -> str:
    """Why the launcher knows the run (its resolved ``workload`` from the plan, at ``attempt``) did not resume;
    empty when it resumed or may have."""
    if not isinstance(workload, Mapping) or not workload:
        return "its plan is not on record"
    if workload.get("command"):
        return "it runs a command of its own; only the built-in trainer resumes"
    params = _section(workload, "parameters")
    checkpoint = _section(params, "checkpoint")
    resume = checkpoint.get("resume", "auto")
    if resume == "never":
        return "its parameters say checkpoint.resume: never"
    if resume != "auto":
        return ""  # a checkpoint named: a resume the launcher asked for
    output_dir = params.get("output_dir")
    if not isinstance(output_dir, str) or not output_dir:
        return "it has no output_dir to resume from"
    if attempt <= 1 and RUN_ID_ENV in output_dir:
        return "its output_dir is its own and it was its first attempt: there was nothing to resume from"
    return ""


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
