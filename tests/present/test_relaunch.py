"""Why ``relaunch`` and ``resume`` refuse while a SLURM job of the run may still be running, as they say it."""

from __future__ import annotations

from launcher.events import RunState
from launcher.present.relaunch import hazard_words
from launcher.runs.leftovers import JobMayLive


def test_a_run_that_has_not_ended_is_to_be_cancelled_first():
    assert hazard_words(JobMayLive("r1", RunState.RUNNING, login_lost=False)) == (
        "its SLURM job may still be running (the run is running); relaunching would start a second job beside "
        "it: fsdp-tui cancel r1 first")


def test_a_lost_login_is_waited_for():
    assert hazard_words(JobMayLive("r1", RunState.FAILED, login_lost=True)) == (
        "its login node was lost while the job ran, so the job may still be running; once the login answers, "
        "the next fsdp-tui command (fsdp-tui runs) stops it, then relaunch")
