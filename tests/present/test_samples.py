"""A run's samples as people read them: each prompt's answers by step, and two sides compared (the CLI's
``show --samples`` and ``sweep show --samples`` on recorded runs: tests/runs/core/test_samples_record.py)."""

from __future__ import annotations

from launcher.present.samples import (
    at_step,
    by_prompt,
    history_lines,
    side_by_side,
    side_by_side_at,
    side_lines,
)
from trainer.wire.samples import Sample, SampleSet

SETS = [SampleSet(4, (Sample("p", "b"), Sample("q", "y", "ref"))), SampleSet(0, (Sample("p", "a"),))]


def test_views_by_prompt_and_side_by_side():
    assert [(h.prompt, h.reference, h.answers) for h in by_prompt(SETS)] == [
        ("p", None, ((0, "a"), (4, "b"))), ("q", "ref", ((4, "y"),))]
    assert at_step(SETS, 3).step == 0 and at_step(SETS, 9).step == 4 and at_step(SETS[1:], -1) is None
    pairs = side_by_side(SETS[1], SETS[0])
    assert [(p.prompt, p.left, p.right, p.reference) for p in pairs] == [("p", "a", "b", None), ("q", None, "y", "ref")]


def test_history_lines_give_each_prompt_its_answers_oldest_first_on_one_line_each():
    sets = [*SETS, SampleSet(8, (Sample("p", "two\nlines"),))]
    assert history_lines(sets) == [
        "prompt 1: p", "      step 0  a", "      step 4  b", "      step 8  two⏎ lines",
        "prompt 2: q", "        data  ref", "      step 4  y"]
    assert history_lines(sets, last=1)[:2] == ["prompt 1: p", "      step 8  two⏎ lines"]
    assert history_lines([]) == []


def test_side_lines_mark_equal_answers_and_cut_what_does_not_fit():
    left, right, pairs = side_by_side_at(SETS, 3, SETS, 9)
    assert (left.step, right.step) == (0, 4)
    assert side_lines(pairs, "step 0", "step 4", width=44) == [
        f"{'step 0':<20}    step 4", "prompt 1: p", f"{'a':<20} |  {'b':<20}",
        "prompt 2: q", "  data: ref", f"{'-':<20} |  {'y':<20}"]
    long = [SampleSet(1, (Sample("p", "x" * 30),))]
    assert side_lines(side_by_side(long[0], long[0]), "l", "r", width=44)[-1] == f"{'x' * 19}… =  {'x' * 19}…"
