"""What a run's owner could not send to MLflow, sent later from the run's own record:
``fsdp-tui mlflow sync RUN``, or ``python -m launcher.runs.owner.send_later --home HOME RUN`` as the next
look at the runs starts it (:func:`launcher.runs.core.pending.start_senders`).

It takes the run's lock like an owner (so it never sends while an owner does, nor twice at once) and
sends exactly what ``mlflow.json`` says is missing: records past the last one sent, the nodes' system
metrics past the last sample sent, the run's end.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from launcher.paths import private_files, run_dir
from launcher.runs.core import pending
from launcher.runs.core.layout import LOG_METRICS, METRICS, TRIAGE, file_size, load_plan, read_records
from launcher.runs.core.ownership import OwnerLock
from launcher.runs.core.samples import read_samples
from launcher.runs.owner.tracking import Tracker


@dataclass(frozen=True)
class Sent:
    """What a try to send a run's tracking came to."""

    done: bool
    """Everything is in MLflow now (or the run does not track)."""
    words: str
    """What happened, for a person."""


def artifacts(directory: Path) -> list[Path]:
    """What a run's MLflow run keeps as artifacts: its node logs, triage, workload and metrics."""
    return sorted((directory / "nodes").glob("*.log")) + [
        directory / TRIAGE, directory / "workload.yaml", directory / METRICS, directory / LOG_METRICS]


def send(home: Path, run_id: str) -> Sent:
    """Send what is missing of ``run_id``'s MLflow run (blocking; each call bounded, see ``tracking``)."""
    directory = run_dir(home, run_id)
    lock = OwnerLock(directory)
    if not lock.acquire():
        return Sent(False, "the run has an owner or another sender now: it sends what is missing itself")
    try:
        try:
            plan = load_plan(directory)
        except (OSError, ValueError, KeyError) as err:
            return Sent(False, f"its plan cannot be read: {err}")
        tracker = Tracker(home, plan, directory)
        if tracker.sink is None:
            pending.clear(directory)
            return Sent(True, "the run does not log to MLflow (mlflow.enabled: false)")
        source = "metrics" if file_size(directory / METRICS) else "log-metrics"
        records = read_records(directory / (METRICS if source == "metrics" else LOG_METRICS))
        samples = read_samples(directory)
        if tracker.sync(records, source) and tracker.sync_samples(samples) and tracker.sync_system(to_end=True):
            tracker.finish(artifacts(directory))
        if not tracker.unsent(len(records), len(samples)):
            pending.clear(directory)
            return Sent(True, f"in MLflow: run {tracker.mlflow_run_id} at {tracker.sink.uri}, "
                              f"{len(records)} records" + (", its end" if tracker.state.end else ""))
        pending.mark(directory, tracker.error or "not sent yet")
        return Sent(False, f"not sent to {tracker.sink.uri}: {tracker.error or 'not sent yet'}")
    finally:
        lock.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.runs.owner.send_later")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("run_id")
    args = parser.parse_args(argv)
    private_files()
    result = send(args.home, args.run_id)
    print(result.words, flush=True)
    return 0 if result.done else 1


if __name__ == "__main__":
    sys.exit(main())
