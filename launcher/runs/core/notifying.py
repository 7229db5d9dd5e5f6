"""The run's owner tells the user: at the end of a run and when it stalls, on the states they chose.

Gathers the facts (store summary, triage, usage, newest complete checkpoint), builds the summary, hands
it to :func:`launcher.notify.deliver.deliver` and keeps what happened to each sink in the run's
``notifications.jsonl`` (shown by ``fsdp-tui show``). Nothing here can fail the run: a problem with the
settings is recorded like a failed send."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.notify.delivery import Delivery
from launcher.paths import run_dir
from launcher.runs.core.layout import read_json_lines

if TYPE_CHECKING:
    from launcher.notify.summary import CheckpointFact, RunFacts
    from launcher.workload.notify import Notify

# Sending's modules (the sinks, the settings' models) are imported where a run's owner sends: ``show``
# reads what was sent (:func:`read_deliveries`) without them.

RECORD = "notifications.jsonl"


def gather_facts(home: Path, run_id: str, event: str, checkpoint: CheckpointFact | None = None) -> RunFacts:
    import socket

    from launcher.notify.summary import RunFacts
    from launcher.runs.core.layout import read_plan, read_swaps, read_triage
    from launcher.runs.core.settings_prices import prices_set
    from launcher.runs.core.store import RunStore
    from launcher.runs.core.usage import usage_of_record

    record = RunStore(home).get_run(run_id)
    if record is None:
        raise LookupError(f"no run '{run_id}'")
    s = record.summary
    directory = run_dir(home, run_id)
    found = read_triage(directory) if event not in ("succeeded", "recovered") else None
    triage = found.to_dict() if found is not None else None
    usage = usage_of_record(record, read_plan(directory), prices_set(), time.time())
    return RunFacts(run_id=run_id, experiment=s.experiment, event=event, detail=s.detail, attempt=s.attempt,
                    duration_s=s.duration_s, step=s.step, max_steps=s.max_steps, last_loss=s.last_loss,
                    best_eval_loss=s.best_eval_loss, usage=usage.to_dict() if usage else {},
                    checkpoint=checkpoint, triage=triage, machine=socket.gethostname(),
                    recovery=tuple(swap.words() for swap in read_swaps(directory)))


def notify_wanted(workload_notify: Notify | None, event: str) -> bool:
    """Whether ``event`` is to be sent (a settings problem counts: it is recorded where sends would be)."""
    from launcher.runs.core.user_settings import SettingsError, effective_notify, load_user_settings

    try:
        notify = effective_notify(workload_notify, load_user_settings())
    except SettingsError:
        return True
    return notify is not None and event in notify.on


def notify_run(home: Path, run_id: str, workload_notify: Notify | None, event: str,
               checkpoint: CheckpointFact | None = None) -> list[Delivery]:
    """Send the run's summary for ``event`` to every configured sink when the user asked for that event;
    records and returns what happened (empty: nothing configured, or not for this event)."""
    from launcher.notify.deliver import deliver
    from launcher.notify.summary import build_summary
    from launcher.runs.core.user_settings import SettingsError, effective_notify, load_user_settings
    from launcher.secrets import SecretStore

    try:
        notify = effective_notify(workload_notify, load_user_settings())
    except SettingsError as err:
        done = [Delivery("settings", False, 0, f"{err}; nothing was sent", time.time(), event)]
        record_deliveries(home, run_id, done)
        return done
    if notify is None or event not in notify.on:
        return []
    summary = build_summary(gather_facts(home, run_id, event, checkpoint))
    done = deliver(notify, summary, SecretStore(home))
    record_deliveries(home, run_id, done)
    return done


def record_deliveries(home: Path, run_id: str, done: list[Delivery]) -> None:
    with open(run_dir(home, run_id) / RECORD, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(d.to_dict()) + "\n" for d in done))


def read_deliveries(directory: Path) -> list[Delivery]:
    """What happened to each sink of the run's notifications, oldest first (a line that is not one is skipped)."""
    found = (Delivery.from_wire(entry) for entry in read_json_lines(directory / RECORD))
    return [d for d in found if d is not None]
