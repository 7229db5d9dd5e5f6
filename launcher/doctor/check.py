"""One concern's verdict on a node (``Check``): ok / warning / error, what was found and what to do.
Its own module so that each check's rule (``memory.py``, ``judge.py``) builds it without a cycle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warning", "error"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    """One line: what was found."""
    fix: str = ""
    """For a warning or error: what to do."""
