"""Each listed run's kind (a probe, an interconnect test, a resume that trained nothing), as the home screen
shows it: asked of the door once per run and state. A run's kind follows only from its launch and, once it
has ended, from how it ended, so a refresh with nothing changed reads no run's folder (the list holds up to
``HOME_RUNS`` runs and is read every 2 s)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from launcher.events import RunState

if TYPE_CHECKING:
    from launcher.api.runs import RunKind, RunSummary


class KnownKinds:
    """Owns the kinds already asked for, by ``(run id, state)``; only what the last list held is kept. Used
    by the one worker that reads the runs (exclusive: one at a time)."""

    def __init__(self) -> None:
        self.known: dict[tuple[str, RunState], RunKind] = {}

    def of(self, runs: Sequence[RunSummary],
           ask: Callable[[Sequence[RunSummary]], list[RunKind]]) -> dict[str, RunKind]:
        """The kind of each of ``runs`` by run id; ``ask`` (the door's ``runs.kinds``) is given only the runs
        new to the list or whose state changed, and is not called when there are none."""
        missing = [r for r in runs if (r.run_id, r.state) not in self.known]
        if missing:
            self.known.update(((r.run_id, r.state), kind) for r, kind in zip(missing, ask(missing), strict=True))
        listed = {(r.run_id, r.state) for r in runs}
        self.known = {key: kind for key, kind in self.known.items() if key in listed}
        return {r.run_id: self.known[(r.run_id, r.state)] for r in runs}
