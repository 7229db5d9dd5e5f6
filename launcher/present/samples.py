"""The samples of a run as people read them, pure: each prompt with its answer per step (``show
--samples``, the monitor's samples pane), and two runs' or two checkpoints' answers side by side
(``sweep show --samples``, the checkpoints screen)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.api.runs import SampleSet


@dataclass(frozen=True)
class PromptHistory:
    """One prompt, the data's answer when it has one, and the model's answer at each sampled step."""

    prompt: str
    reference: str | None
    answers: tuple[tuple[int, str], ...]


def by_prompt(sets: list[SampleSet]) -> list[PromptHistory]:
    """Each prompt (in the order the trainer asked them) with its answers, oldest step first."""
    order: list[str] = []
    refs: dict[str, str | None] = {}
    answers: dict[str, list[tuple[int, str]]] = {}
    for found in sorted(sets, key=lambda s: s.step):
        for s in found.samples:
            if s.prompt not in answers:
                order.append(s.prompt)
                answers[s.prompt] = []
                refs[s.prompt] = s.reference
            answers[s.prompt].append((found.step, s.answer))
    return [PromptHistory(p, refs[p], tuple(answers[p])) for p in order]


def history_lines(sets: list[SampleSet], last: int | None = None) -> list[str]:
    """Plain lines: each prompt, its reference, then ``step N  answer`` per step (the ``last`` steps)."""
    if not sets:
        return []
    out: list[str] = []
    for i, h in enumerate(by_prompt(sets), 1):
        out.append(f"prompt {i}: {_one_line(h.prompt)}")
        if h.reference is not None:
            out.append(f"  {'data':>10}  {_one_line(h.reference)}")
        for step, answer in h.answers[-last:] if last else h.answers:
            out.append(f"  {'step ' + str(step):>10}  {_one_line(answer)}")
    return out


@dataclass(frozen=True)
class SidePair:
    """One prompt's answers in two places (two checkpoints of a run, or two runs)."""

    prompt: str
    reference: str | None
    left: str | None
    right: str | None


def side_by_side(left: SampleSet | None, right: SampleSet | None) -> list[SidePair]:
    """The prompts of either side, each with both answers (``None`` where that side was not asked it)."""
    lefts = {s.prompt: s for s in (left.samples if left else ())}
    rights = {s.prompt: s for s in (right.samples if right else ())}
    prompts = list(lefts) + [p for p in rights if p not in lefts]
    return [SidePair(p, (lefts.get(p) or rights[p]).reference, lefts[p].answer if p in lefts else None,
                     rights[p].answer if p in rights else None) for p in prompts]


def at_step(sets: list[SampleSet], step: int) -> SampleSet | None:
    """The answers the model gave at ``step``, else the newest before it (a checkpoint's step need not
    be a sampling step); ``None`` when none was taken by then."""
    before = [s for s in sets if s.step <= step]
    return max(before, key=lambda s: s.step) if before else None


def side_by_side_at(left_sets: list[SampleSet], left_step: int, right_sets: list[SampleSet],
                    right_step: int) -> tuple[SampleSet | None, SampleSet | None, list[SidePair]]:
    """Both sides' answers at their step (the newest sampled at or before it) and the pairs."""
    left, right = at_step(left_sets, left_step), at_step(right_sets, right_step)
    return left, right, side_by_side(left, right)


def side_lines(pairs: list[SidePair], left_label: str, right_label: str, width: int = 100) -> list[str]:
    """Plain two-column lines: per prompt, its reference, then both answers one under the other when the
    columns would be too narrow to read."""
    col = max(20, (width - 4) // 2)
    out = [f"{left_label[:col]:<{col}}    {right_label[:col]}"]
    for i, p in enumerate(pairs, 1):
        out.append(f"prompt {i}: {_one_line(p.prompt)}")
        if p.reference is not None:
            out.append(f"  data: {_one_line(p.reference)}")
        left, right = _one_line(p.left) if p.left is not None else "-", _one_line(p.right) if p.right is not None else "-"
        marker = "=" if p.left == p.right else "|"
        out.append(f"{_fit(left, col)} {marker}  {_fit(right, col)}")
    return out


def _one_line(text: str | None) -> str:
    return "" if text is None else text.replace("\n", "⏎ ")


def _fit(text: str, width: int) -> str:
    return f"{text:<{width}}" if len(text) <= width else text[: width - 1] + "…"
