"""What a dry run (``fsdp-tui run --dry-run``) and the editor's plan preview say of a plan besides its
commands: will it fit in memory, and what will it cost (or how to measure it). ``file`` is the workload as
the user names it, in the commands these lines suggest."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.api.runs import Estimate, PlanFit


def fit_lines(fit: PlanFit, file: str = "FILE") -> list[str]:
    """Each rank's predicted peak memory against the rank's memory where it is known here, and what would make
    it fit when it does not; or why nothing is predicted."""
    said = fit.verdict
    if said is None:
        return [fit.unknown]
    sharding = said.prediction.setup.sharding
    lines = said.lines()
    if fit.auto:
        lines[0] = lines[0].replace(f"({sharding}", f"({sharding} (auto's choice)", 1)
    return [line.replace("`fsdp-tui doctor FILE`", f"`fsdp-tui doctor {file}`") for line in lines]


def estimate_lines(estimate: Estimate | None, file: str = "FILE") -> list[str]:
    """The launch's estimate of wall time, GPU-hours and cost; without one, how to measure it."""
    if estimate is not None:
        return estimate.lines()
    return [f"estimate: nothing measured yet for this workload: `fsdp-tui doctor {file} --estimate` times its "
            "first steps on its nodes (or launch it once)"]
