"""Parameter sweeps: every variant of a workload launched as a run of its own, driven by a detached
process that outlives the front end; listed, shown side by side, cancelled, resumed, adopted."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.api._lazy import lazy_names

if TYPE_CHECKING:
    from launcher.runs.read.comparison import RunStats
    from launcher.runs.sweeps.record import FINAL_SWEEP, SweepRecord, VariantRecord
    from launcher.workload.sweep import SWEEP_NOT_RUN, SweepPlan

__getattr__ = lazy_names(__name__, {
    "launcher.runs.read.comparison": ("RunStats",),
    "launcher.runs.sweeps.record": ("FINAL_SWEEP", "SweepRecord", "VariantRecord"),
    "launcher.workload.sweep": ("SWEEP_NOT_RUN", "SweepPlan"),
})

__all__ = ["FINAL_SWEEP", "SWEEP_NOT_RUN", "RunStats", "SweepNotFound", "SweepPlan", "SweepRecord", "Sweeps",
           "VariantRecord"]


class SweepNotFound(LookupError):
    """No sweep, or more than one, matches what was asked; ``str()`` is one line that says which."""


class Sweeps:
    """The sweeps of one data dir: their records are read here, their drivers do the work."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)

    def plan(self, file: Path, over: Sequence[str] = (), overrides: Sequence[str] = ()) -> SweepPlan:
        """The workload ``file`` validated (with ``overrides``), its ``sweep:`` section and the ``over`` axes
        expanded, every variant planned; nothing is touched."""
        from launcher.workload.sweep import plan_sweep

        return plan_sweep(file, over, overrides, home=self.home)

    def start(self, plan: SweepPlan, *, parallel: int | None = None) -> str:
        """Record the sweep and start its driver, detached (``parallel`` variants at once, default the
        file's); the sweep's id."""
        from launcher.runs.sweeps.control import start_sweep

        return start_sweep(plan, self.home, parallel=parallel)

    def find(self, prefix: str) -> str:
        """The sweep whose id starts (or ends) with ``prefix``; :class:`SweepNotFound` in one line otherwise."""
        from launcher.runs.sweeps.record import find_sweep

        try:
            return find_sweep(self.home, prefix)
        except LookupError as err:
            raise SweepNotFound(str(err)) from None

    def get(self, sweep_id: str) -> SweepRecord:
        """The sweep's record: its state, detail and every variant's run and state."""
        from launcher.runs.sweeps.record import load_sweep

        return load_sweep(self.home, sweep_id)

    def adopt(self, sweep_ids: list[str] | None = None) -> list[str]:
        """Every sweep not ended whose driver is gone (of ``sweep_ids``, or all) gets a new one; those adopted."""
        from launcher.runs.sweeps.control import adopt_sweeps

        return adopt_sweeps(self.home, sweep_ids)

    def driver_alive(self, sweep_id: str) -> bool:
        """Whether the sweep's driver holds its lock now."""
        from launcher.runs.sweeps.driver import driver_alive

        return driver_alive(self.home, sweep_id)

    async def cancel(self, sweep_id: str, *, timeout_s: float = 180.0) -> SweepRecord:
        """Stop starting variants and cancel the running ones; the record once the sweep has ended (or when
        waiting gave up)."""
        from launcher.runs.sweeps.control import cancel_sweep

        return await cancel_sweep(self.home, sweep_id, timeout_s=timeout_s)

    def resume(self, sweep_id: str) -> SweepRecord:
        """The variants of an ended sweep that did not succeed, run again by a new driver; ``ValueError``
        says why not (the sweep has not ended, or every variant succeeded)."""
        from launcher.runs.sweeps.control import resume_sweep

        return resume_sweep(self.home, sweep_id)

    def stats(self, record: SweepRecord) -> list[RunStats]:
        """Every variant's run side by side, labelled by what varies."""
        from launcher.runs.read.comparison import sweep_stats

        return sweep_stats(self.home, record)

    # Last in the class: inside its body ``list`` names this method, not the builtin.
    def list(self) -> builtins.list[SweepRecord]:
        """Every sweep, newest first."""
        from launcher.runs.sweeps.record import list_sweeps

        return list_sweeps(self.home)
