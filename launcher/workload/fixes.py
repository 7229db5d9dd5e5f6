"""Mechanical fixes for problems: rename a misspelled key to its did-you-mean, add a missing required
key with a placeholder. A fix is an edit of the text the problem was found in, applied with one key."""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.workload.cursor import key_path_at
from launcher.workload.problems import Problem

PLACEHOLDERS = {
    "experiment_name": "my-run",
    "model_name": "<hub id or model folder>",
    "dataset_name": "<hub dataset or data file>",
    "output_dir": "outputs",
}
"""Values written for a missing key; ``<...>`` is left for the user to fill in."""


@dataclass(frozen=True)
class Fix:
    """Replace the text between ``start`` and ``end`` (0-based ``(row, column)``) with ``insert``."""

    title: str
    start: tuple[int, int]
    end: tuple[int, int]
    insert: str

    def apply(self, text: str) -> str:
        lines = text.split("\n")
        offset = [0]
        for line in lines:
            offset.append(offset[-1] + len(line) + 1)
        a = offset[self.start[0]] + self.start[1]
        b = offset[self.end[0]] + self.end[1]
        return text[:a] + self.insert + text[b:]


def fix_for(problem: Problem, text: str) -> Fix | None:
    """The fix of ``problem`` in ``text``, or ``None`` when it needs the user's judgement."""
    unknown = re.fullmatch(r"unknown key '([^']+)'", problem.message)
    suggested = re.fullmatch(r"did you mean '([^']+)'\?", problem.hint)
    if unknown and suggested:
        return _rename(text, problem, unknown.group(1), suggested.group(1))
    missing = re.fullmatch(r"missing required key '([^']+)'", problem.message)
    if missing:
        parent = tuple(problem.path.split("."))[:-1] if problem.path else ()
        return _add_key(text, parent, missing.group(1))
    return None


def _rename(text: str, problem: Problem, old: str, new: str) -> Fix | None:
    lines = text.split("\n")
    row = problem.line - 1
    if row >= len(lines):
        return None
    col = lines[row].find(old, max(problem.column - 1, 0))
    if col < 0:
        col = lines[row].find(old)
    if col < 0:
        return None
    return Fix(f"rename '{old}' to '{new}'", (row, col), (row, col + len(old)), new)


def _add_key(text: str, parent: tuple[str, ...], key: str) -> Fix | None:
    lines = text.split("\n")
    value = PLACEHOLDERS.get(key, "<value>")
    title = f"add '{key}: {value}'"
    if not parent:
        row = next((i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")), 0)
        return Fix(title, (row, 0), (row, 0), f"{key}: {value}\n")
    row = _row_of(lines, parent)
    if row is None:
        return None
    indent = len(lines[row]) - len(lines[row].lstrip())
    child = indent + 2
    for line in lines[row + 1:]:
        if line.strip() and not line.lstrip().startswith("#"):
            other = len(line) - len(line.lstrip())
            if other > indent:
                child = other
            break
    line = f"{' ' * child}{key}: {value}"
    if row + 1 >= len(lines):
        end = (row, len(lines[row]))
        return Fix(title, end, end, "\n" + line)
    return Fix(title, (row + 1, 0), (row + 1, 0), line + "\n")


def _row_of(lines: list[str], path: tuple[str, ...]) -> int | None:
    text = "\n".join(lines)
    for row, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(path[-1]) and ":" in stripped and key_path_at(text, row) == path:
            return row
    return None
