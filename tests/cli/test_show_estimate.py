"""``show``'s estimate line: the real wall time against the estimate as a percentage only for a run that is
what was estimated; for any other its real time and why it is not compared (table-driven, pure)."""

from __future__ import annotations

import pytest

from launcher.cli.show import _estimate_words
from launcher.runs.core.estimate import Estimate, RealFigures

EST = Estimate(wall_s=135.0, low_s=120.0, high_s=150.0, steps=300, startup_s=5.0, step_s=0.4, evals=0, eval_s=0.0,
               tail_s=0.0, source="run a (steps 1-300)", source_run="a", unit="CPU", hours=0.04, cost=None,
               currency="", correction=1.0, corrected_by=0)


@pytest.mark.parametrize("real, says, never", [
    (None, "from run a (steps 1-300)", "real"),
    ({"real_wall_s": 140.0, "compared": True, "error": 0.037, "ratio": 1.04}, "real 2:20 (+4%)", "not compared"),
    ({"real_wall_s": 81.0, "compared": False, "why": "cancelled at step 149 of 300", "error": None},
     "real 1:21 (not compared: cancelled at step 149 of 300)", "%"),
    ({"real_wall_s": 16.0, "compared": False, "why": "trained nothing", "error": None},
     "(not compared: trained nothing)", "%"),
    # a record kept before the rule: an error for a cancelled run, but no ratio (only complete runs had one)
    ({"real_wall_s": 3.0, "steps_done": 32, "succeeded": False, "error": -0.98, "ratio": None},
     "real 0:03 (not compared: not the run estimated)", "%"),
    ({"real_wall_s": 140.0, "steps_done": 300, "succeeded": True, "error": 0.037, "ratio": 1.04}, "(+4%)", "not"),
])
def test_the_percentage_is_shown_only_where_it_means_something(real, says, never):
    words = _estimate_words(EST, RealFigures.from_wire(real))  # the record's real figures as read
    assert says in words and never not in words.split("from run a")[1]
