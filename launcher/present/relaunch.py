"""Why a relaunch (or resume) is refused while a SLURM job of the run may still be running, in words."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.api.runs import JobMayLive


def hazard_words(hazard: JobMayLive) -> str:
    """What may still run, and what to do first."""
    if hazard.login_lost:
        return ("its login node was lost while the job ran, so the job may still be running; once the login "
                "answers, the next fsdp-tui command (fsdp-tui runs) stops it, then relaunch")
    return (f"its SLURM job may still be running (the run is {hazard.state.value}); relaunching "
            f"would start a second job beside it: fsdp-tui cancel {hazard.run_id} first")
