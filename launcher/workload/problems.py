"""A problem found in a workload file: where it is, what is wrong, what to do."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["error", "warning"]
ORIGIN_CHARS = 120
"""An override is named by its text up to this long (a 5000-digit value is named, not printed)."""


@dataclass(frozen=True, order=True)
class Problem:
    """One finding. ``line`` and ``column`` are 1-based; ``path`` is the dotted key (``compute.hosts[1]``)."""

    file: str
    line: int
    column: int
    path: str
    severity: Severity
    message: str
    hint: str = ""
    origin: str = ""
    """For a problem of a ``--set`` override: the override as typed (``line`` is its position)."""

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def format(self) -> str:
        """``file:line:col: severity: key.path: message (hint)`` as compilers print it; a problem of an
        override names the override (``--set a.b=1: error: ...``)."""
        where = f"{self.path}: " if self.path else ""
        hint = f" ({self.hint})" if self.hint else ""
        origin = self.origin if len(self.origin) <= ORIGIN_CHARS else f"{self.origin[:ORIGIN_CHARS]}..."
        place = f"{self.file} {origin}" if self.origin else f"{self.file}:{self.line}:{self.column}"
        return one_line(f"{place}: {self.severity}: {where}{self.message}{hint}")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.origin:
            del out["origin"]
        return out


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str) -> str:
    """``text`` with every control character written as its escape (``\\n``, ``\\x00``): a key or value
    that holds a newline cannot split a problem over two lines, nor send anything to a terminal."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A "did you mean ...?" hint for a misspelled key or value, or "" when nothing is close."""
    options = [c for c in choices if isinstance(c, str)]
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if not match:
        lowered = {c.lower(): c for c in options}
        if word.lower() in lowered:
            match = [lowered[word.lower()]]
    return f"did you mean '{match[0]}'?" if match else ""


def format_path(path: tuple[str | int, ...]) -> str:
    """``("compute", "hosts", 1)`` -> ``compute.hosts[1]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def has_errors(problems: Iterable[Problem]) -> bool:
    return any(p.is_error for p in problems)
