"""The monitor's ETA, from the steps' own times: right when the records come in a burst (a monitor opened
late, a reopened run), counting down between steps, and gone while no step comes (a hung node)."""

from __future__ import annotations

import pytest

from launcher.events import MetricsRecorded, RunState, RunStateChanged
from launcher.runs.read.view import RunView
from trainer.wire.protocol import MetricRecord


def _view(steps: list[tuple[int, float]], *, applied_at: float | None = None, max_steps: int = 300) -> RunView:
    """A view fed train records of ``(step, its own time)``; ``applied_at``: all read at that moment."""
    v = RunView("r")
    v.apply(RunStateChanged("r", RunState.RUNNING, 1), now=0.0)
    for step, at in steps:
        v.apply(MetricsRecorded("r", MetricRecord(step=step, max_steps=max_steps, loss=1.0, time=at)),
                now=applied_at if applied_at is not None else at)
    return v


@pytest.mark.parametrize("case, steps, applied_at, now, eta", [
    # 1 s a step: 259 steps to go at step 41 is 259 s, whenever the records were read.
    ("read as they came", [(s, 10.0 + s) for s in range(1, 42)], None, 51.0, 259.0),
    ("read in one burst when the monitor opened", [(s, 10.0 + s) for s in range(1, 42)], 51.0, 51.0, 259.0),
    ("between two steps it counts down", [(s, 10.0 + s) for s in range(1, 42)], None, 51.5, 258.5),
    ("a node hangs: no figure rather than a growing one", [(s, 10.0 + s) for s in range(1, 42)], None, 51.0 + 31,
     None),
    ("one step seen: no rate yet", [(1, 11.0)], None, 12.0, None),
])
def test_eta(case, steps, applied_at, now, eta):
    got = _view(steps, applied_at=applied_at).eta_s(now=now)
    assert got == (pytest.approx(eta) if eta is not None else None), case


def test_eta_of_records_without_their_own_time_uses_when_they_came():
    v = RunView("r")
    for step in (1, 2, 3):
        v.apply(MetricsRecorded("r", MetricRecord(step=step, max_steps=11, loss=1.0)), now=100.0 + step)
    assert v.eta_s(now=103.0) == pytest.approx(8.0)
