"""MLflow for one run, kept apart from the run's fate: a tracking failure is reported and retried,
never fatal, and the MLflow run is brought up to date from the run's own records when it works again.

Every write to the data dir's tracking store holds ``mlflow.lock`` (an ``flock``), so concurrent owners
(parallel launches, sweeps) never write, create or migrate the store at the same moment. What has been
logged is remembered in ``mlflow.json`` beside the run's record, so an owner that adopts the run
re-opens the same MLflow run and logs only what is missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Literal

from launcher.runs.core.layout import STATE_FILE, load_options
from launcher.runs.owner.mlflow_sink import MlflowSink
from launcher.workload.plan import RunPlan
from trainer.protocol import MetricRecord

LOCK_FILE = "mlflow.lock"
RETRY_S = 30.0
"""After a failure, syncing waits this long before trying the store again (the run's end tries at once)."""


@contextlib.contextmanager
def store_lock(home: Path):
    """Held around every MLflow write of this data dir (processes and threads alike)."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Tracker:
    """Blocking calls: the owner runs them in a worker thread."""

    def __init__(self, home: Path, plan: RunPlan, run_dir: Path) -> None:
        cfg = plan.workload.mlflow
        self.enabled = cfg.enabled
        self.home, self.plan, self.path = Path(home), plan, run_dir / STATE_FILE
        self.sink = MlflowSink(cfg.tracking_uri, cfg.experiment or plan.workload.experiment_name,
                               plan.workload.mlflow_name or plan.run_id, self.home) if cfg.enabled else None
        self.state = self._load()
        self.opened = False
        self.error: str | None = None
        """The last failure, in words; ``None`` while tracking works."""
        self.pending: list[MetricRecord] = []
        self.retry_at = 0.0

    def _load(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state))
        os.replace(tmp, self.path)

    @property
    def mlflow_run_id(self) -> str | None:
        return self.state.get("run_id")

    def _guard(self, what, *args) -> bool:
        """Run ``what(*args)`` under the store's lock; a failure is kept in ``error``, never raised."""
        try:
            with store_lock(self.home):
                what(*args)
        except Exception as err:  # noqa: BLE001 - tracking is not the job: any failure is reported, not fatal
            self.error = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
            self.retry_at = time.monotonic() + RETRY_S
            return False
        self.error = None
        return True

    def _open(self) -> None:
        if self.mlflow_run_id:
            self.sink.reopen(self.mlflow_run_id)
        else:
            tags = {**load_options(self.path.parent).get("tags", {}), "fsdp_tui.run_id": self.plan.run_id}
            run_id = self.sink.start(self.plan.workload.parameters, tags)
            self.state.update(run_id=run_id, source="metrics", synced=0)
            self._save()
        self.opened = True

    def sync(self, all_records: list[MetricRecord], source: Literal["metrics", "log-metrics"]) -> bool:
        """Log what ``all_records`` (every record of the run from ``source``) has beyond what is logged."""
        if self.sink is None:
            return True
        if self.error is not None and time.monotonic() < self.retry_at:
            return False
        if not self.opened and not self._guard(self._open):
            return False
        if self.state.get("source") != source:
            self.state.update(source=source, synced=0)
        synced = int(self.state.get("synced", 0))
        todo = all_records[synced:]
        if not todo:
            return True

        def log() -> None:
            self.sink.log_records(todo)
            self.state["synced"] = synced + len(todo)
            self._save()

        return self._guard(log)

    def sync_samples(self, sets: list) -> bool:
        """Append the samples steps beyond those logged to the MLflow run's table (``sets``: every step's
        answers, clean, oldest first); the count logged is kept with the rest of ``mlflow.json``."""
        if self.sink is None or not self.opened:
            return True
        logged = int(self.state.get("samples_synced", 0))
        todo = sets[logged:]
        if not todo:
            return True

        def log() -> None:
            self.sink.log_samples(todo)
            self.state["samples_synced"] = logged + len(todo)
            self._save()

        return self._guard(log)

    def finish(self, status: Literal["FINISHED", "FAILED", "KILLED"], artifacts: list[Path],
               totals: dict[str, float] | None = None) -> bool:
        """End the MLflow run; ``totals`` (GPU-hours, cost) are logged as metrics once."""
        if self.sink is None:
            return True
        if not self.opened and not self._guard(self._open):
            return False
        return self._guard(self.sink.finish, status, artifacts, totals)
