"""One MLflow run per launch, written by the run's owner (or a later sender of what it could not send);
every write to this data dir's local store is serialised by :mod:`launcher.runs.owner.tracking`'s lock
(one writer per SQLite file at a time)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from launcher.paths import private_file
from launcher.runs.owner.mlflow_store import check_sqlite, made_whole
from trainer.wire.fit_record import FitSummary
from trainer.wire.flops import MFU_CONVENTION
from trainer.wire.protocol import MetricRecord, ResumeCheck

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

_METRICS = ("loss", "lr", "grad_norm", "tokens_per_s", "mfu", "eval_loss", "eval_exact_match", "router_aux_loss")
_MEMORY = ("device_used_gib", "allocated_gib", "reserved_gib", "peak_gib", "rss_gib", "peak_rss_gib")
"""Per rank, as ``memory/rank<N>/<field>``: what the monitor's gauges show, and the peaks the memory
prediction (``memory/predicted_gib``) is compared with."""


SAMPLES_TABLE = "samples.json"
"""The MLflow table of a run's generation samples (``logging.samples``)."""

HTTP_TIMEOUT_S = 5
"""MLflow's request timeout (seconds, an integer: MLflow reads it so), for connecting and for each wait
for the server's answer; its own retries are off: the tracker retries every 30 s, never for minutes."""
MLFLOW_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": str(HTTP_TIMEOUT_S),
}
"""MLflow's own settings for its HTTP calls (it reads them at every request), set by the sink for the
process that writes: by default one call to a dead server retries for about 4 minutes."""


def default_tracking_uri(home: Path) -> str:
    return f"sqlite:///{Path(home) / 'mlflow.db'}"


def flatten(params: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = str(value)[:6000]
    return out


class MlflowSink:
    """Blocking calls: use them from a worker thread, never the UI's event loop."""

    def __init__(self, tracking_uri: str | None, experiment: str, run_name: str | None, home: Path) -> None:
        self.uri = tracking_uri or default_tracking_uri(home)
        self.experiment = experiment
        self.run_name = run_name
        self.home = Path(home)
        self.client: MlflowClient | None = None
        self.run_id: str | None = None
        self._mfu_said: str | None = None
        """The MLflow run whose MFU convention is tagged already (once a run, with its first MFU)."""

    @staticmethod
    def warm() -> None:
        """Import MLflow (seconds on a busy machine) before any lock is taken for a write."""
        from trainer.wire.startup import imports_without_gc

        with imports_without_gc(freeze=False):
            import mlflow.entities  # noqa: F401
            from mlflow import MlflowClient  # noqa: F401

    def check_local(self) -> None:
        """A SQLite store that cannot be opened fails here, at once and before MLflow is imported."""
        if self.uri.startswith("sqlite:///"):
            path = Path(self.uri[len("sqlite:///"):])
            if self.uri == default_tracking_uri(self.home):
                private_file(path)  # the data dir's own store: its user's alone, as the run store
            check_sqlite(path)

    def _run(self) -> tuple[MlflowClient, str]:
        """The client and the MLflow run this sink writes to, once :meth:`start` or :meth:`reopen` set them."""
        if self.client is None or self.run_id is None:
            raise RuntimeError("the MLflow run is written only after start() or reopen()")
        return self.client, self.run_id

    def _client(self) -> MlflowClient:
        from mlflow import MlflowClient

        os.environ.update(MLFLOW_HTTP)
        self.check_local()
        if self.uri.startswith("sqlite:///"):
            made_whole(Path(self.uri[len("sqlite:///"):]), self.home / "mlflow-artifacts")
        return MlflowClient(tracking_uri=self.uri)

    def start(self, params: dict[str, Any], tags: dict[str, str] | None = None, *, key: str | None = None) -> str:
        """The MLflow run of this launch, with ``params`` and ``tags``. ``key`` names the tag (among ``tags``)
        that is the launch's identity: a run that already carries it is carried on, not started twice (an
        earlier owner killed after MLflow made its run but before it noted the id: its adopter, or a
        restarted sweep driver, finds it by that tag). Params logged again hold the same values."""
        from mlflow.entities import Param

        client = self.client = self._client()
        exp = client.get_experiment_by_name(self.experiment)
        if exp is not None:
            exp_id = exp.experiment_id
        else:
            # A SQLite store puts artifacts under ./mlruns of whatever folder we run in: keep them with it.
            location = (self.home / "mlflow-artifacts").as_uri() if self.uri.startswith("sqlite:") else None
            exp_id = client.create_experiment(self.experiment, artifact_location=location)
        found = self._started(client, exp_id, key, (tags or {})[key]) if key is not None else None
        run = found or client.create_run(exp_id, run_name=self.run_name, tags=tags or {})
        run_id = self.run_id = run.info.run_id
        items = [Param(k, v) for k, v in flatten(params).items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i:i + 100])
        return run_id

    @staticmethod
    def _started(client: MlflowClient, exp_id: str, key: str, value: str) -> Run | None:
        """The experiment's run tagged ``key`` = ``value`` (the oldest, should there be more), or ``None``.
        MLflow's filter has no escape inside a quoted value: a value holding both quotes is never found
        (launch and sweep ids are letters, digits and dashes)."""
        quote = next((q for q in ("'", '"') if q not in value), None)
        if quote is None:
            return None
        runs = client.search_runs([exp_id], filter_string=f"tags.`{key}` = {quote}{value}{quote}",
                                  order_by=["start_time ASC"], max_results=1)
        return runs[0] if runs else None

    def reopen(self, run_id: str) -> None:
        """Carry on writing an MLflow run started by an earlier owner of the same launch."""
        self.client = self._client()
        self.client.get_run(run_id)
        self.run_id = run_id

    def log_records(self, records: Iterable[MetricRecord]) -> None:
        client, run_id = self._run()
        from mlflow.entities import Metric

        metrics = []
        for r in records:
            check = ResumeCheck.from_record(r)
            if check is not None:  # a resume's badge: tags, the newest resume's wins
                client.set_tag(run_id, "fsdp_tui.resume_check", check.verdict)
                client.set_tag(run_id, "fsdp_tui.resume_differs", "; ".join(check.differs)[:5000] or "nothing")
            stamp = int((r.time or 0) * 1000)
            if r.mfu is not None and self._mfu_said != run_id:  # what the ``mfu`` metric counts
                client.set_tag(run_id, "fsdp_tui.mfu_convention", MFU_CONVENTION)
                self._mfu_said = run_id
            fit = FitSummary.from_record(r)
            if fit is not None:  # the prediction, beside each rank's measured peak in the same charts
                client.set_tag(run_id, "fsdp_tui.memory_predicted", fit.words())
                metrics += [Metric(name, value, stamp, 0) for name, value in (
                    ("memory/predicted_gib", fit.expected_gib), ("memory/need_gib", fit.need_gib))]
            values = [(name, getattr(r, name)) for name in _METRICS]
            values += [(f"memory/rank{m.rank}/{f}", getattr(m, f)) for m in r.memory for f in _MEMORY]
            for name, value in values:
                if value is not None and math.isfinite(value):
                    metrics.append(Metric(name, float(value), stamp, r.step))
        for i in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[i:i + 1000])

    def set_tags(self, tags: dict[str, str]) -> None:
        """Tags of the run (what a swap says: :meth:`Tracker.sync_swaps`)."""
        client, run_id = self._run()
        for key, value in tags.items():
            client.set_tag(run_id, key, value)

    def log_system(self, metrics) -> None:
        """Nodes' system metrics (:class:`~launcher.runs.owner.system_metrics.SystemMetric`), in
        ``log_batch`` calls of at most MLflow's limit each."""
        client, run_id = self._run()
        from mlflow.entities import Metric

        from launcher.runs.owner.system_metrics import BATCH

        items = [Metric(m.key, m.value, m.timestamp_ms, m.step) for m in metrics]
        for i in range(0, len(items), BATCH):
            client.log_batch(run_id, metrics=items[i:i + BATCH])

    def log_samples(self, sets) -> None:
        """New steps' answers (:class:`trainer.wire.samples.SampleSet`, already clean) appended to the run's
        ``samples.json`` table (MLflow's ``log_table``: one row per step and prompt)."""
        client, run_id = self._run()
        rows = [(found.step, s.prompt, s.answer, s.reference or "") for found in sets for s in found.samples]
        if not rows:
            return
        step, prompt, answer, reference = (list(column) for column in zip(*rows, strict=True))
        client.log_table(run_id, {"step": step, "prompt": prompt, "answer": answer,
                                            "reference": reference}, SAMPLES_TABLE)

    def finish(self, status: Literal["FINISHED", "FAILED", "KILLED"], artifacts: Iterable[Path],
               totals: dict[str, float] | None = None) -> None:
        client, run_id = self._run()
        for key, value in (totals or {}).items():
            client.log_metric(run_id, key, value)
        for path in artifacts:
            if Path(path).is_file():
                client.log_artifact(run_id, str(path))
        client.set_terminated(run_id, status=status)
