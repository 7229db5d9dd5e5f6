"""How a run's attempt ends, and the one exception that ends a launch: shared by the run policy and the
parts it composes (the scheduler's verdicts, the rendezvous port)."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.events import RunState
from launcher.runs.core.triage import TriageReport


@dataclass(frozen=True)
class Outcome:
    """How an attempt, or the run, ended."""

    state: RunState
    exit_code: int | None = None
    triage: TriageReport | None = None
    why: str = ""


class LaunchFailed(Exception):
    """The run cannot go on; ``str()`` says why in words a user can act on."""

    def __init__(self, why: str, node_rank: int | None = None) -> None:
        super().__init__(why)
        self.node_rank = node_rank
        """The node that failed, when it was one node."""
