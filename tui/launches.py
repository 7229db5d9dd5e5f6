"""What the app launches: a workload as written, a run again, a run from one of its checkpoints, every variant
of a sweep. Each goes through the core's one door (``Runs.launch``: the same checks and records as
``fsdp-tui run``); its outcome is said in a notification and the run (or the sweep) is opened."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tui.app_base import AppBase

if TYPE_CHECKING:
    from launcher.workload.overrides import Override


class Launches:
    """Owns the app's launches (one at a time: a new one replaces one still being checked) and the runs they
    started, which the app names when it quits while they go on."""

    def __init__(self, app: AppBase, *, open_run: Callable[[str], None], open_editor: Callable[[Path], None],
                 open_sweep: Callable[[str], None]) -> None:
        self.app = app
        self.open_run, self.open_editor, self.open_sweep = open_run, open_editor, open_sweep
        self.started: list[str] = []
        """Runs started from this app, in launch order."""

    def workload(self, path: Path, overrides: list[str]) -> None:
        self.app.run_worker(self._launch(path, overrides), group="launch", exclusive=True)

    def relaunch(self, run_id: str, overrides: list[Override]) -> None:
        self.app.run_worker(self._launch(None, overrides, from_run=run_id), group="launch", exclusive=True)

    def resume(self, run_id: str, checkpoint: str) -> None:
        self.app.run_worker(self._launch(None, [], from_run=run_id, resume_from=checkpoint), group="launch",
                            exclusive=True)

    def sweep(self, path: Path) -> None:
        self.app.run_worker(self._sweep(path), group="launch", exclusive=True)

    async def _launch(self, path: Path | None, overrides: list[str] | list[Override], from_run: str | None = None,
                      resume_from: str | None = None) -> None:
        from launcher.api.runs import AlreadyLaunched, RecordUnwritable, Refused

        app, runs = self.app, self.app.client.runs
        try:
            if resume_from is not None and from_run is not None:
                source = await runs.plan_resume(from_run, name=resume_from, overrides=overrides)
            elif from_run is not None:
                source = await asyncio.to_thread(runs.plan_relaunch, from_run, overrides)
            else:
                assert path is not None
                source = path
            outcome = await asyncio.to_thread(runs.launch, source, overrides, idempotent=from_run is None)
        except (LookupError, OSError) as err:
            app.notify(f"not launched: {err}", severity="error", timeout=10)
            return
        except RecordUnwritable as err:
            app.notify(str(err), severity="error", timeout=15)
            return
        if isinstance(outcome, Refused):
            if outcome.stage == "output_dir":
                app.notify(outcome.reasons[0], severity="error", timeout=15)
                return
            said = outcome.reasons[0] if outcome.stage == "invalid" else "; ".join(outcome.reasons)
            # a missing secret, an unknown host key, no torch there: said now, no failed run left
            app.notify(f"not launched: {said}", severity="error", timeout=20 if outcome.stage == "checks" else 10)
            if outcome.stage == "invalid" and path is not None:
                self.open_editor(path)
            return
        if isinstance(outcome, AlreadyLaunched):
            app.notify(f"idempotency_token was launched before as run {outcome.run_id}: not launched again",
                       timeout=8)
        continues = getattr(outcome, "continues", None)
        if continues is not None:  # said as it starts: which run it continues, from which step
            app.notify(f"run {outcome.run_id} {continues.words()}", timeout=10)
        self.started.append(outcome.run_id)
        self.open_run(outcome.run_id)
        if from_run is None and path is not None and outcome.plan.workload.sweep is not None:
            from launcher.api.sweeps import SWEEP_NOT_RUN

            app.notify(SWEEP_NOT_RUN.format(file=path.name) + " (here: w on the home screen)", timeout=10)

    async def _sweep(self, path: Path) -> None:
        sweeps = self.app.client.sweeps
        plan = await asyncio.to_thread(sweeps.plan, path)
        if not plan.ok:
            errors = [p for p in plan.problems if p.is_error]
            self.app.notify(f"sweep not launched: {errors[0].format() if errors else 'no variants'}",
                            severity="error", timeout=10)
            return
        self.open_sweep(await asyncio.to_thread(sweeps.start, plan))
