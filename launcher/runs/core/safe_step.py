"""The last safe step: the newest complete checkpoint of a run (what a relaunch resumes from) and how long
ago it was written, asked of the node that holds it. Shown by ``fsdp-tui show`` and the run monitor, and
sent in notifications."""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.notify.summary import CheckpointFact, fmt_age
from launcher.runs.core.checkpoints import NoOutputDir, list_checkpoints

NONE_YET = "no complete checkpoint yet"
"""What the holder said: it answered, and none of the run's checkpoints is whole."""


@dataclass(frozen=True)
class SafeStep:
    found: CheckpointFact | None
    why_not: str = ""
    """Why there is no step to show: none complete yet, or the node could not be asked (and why)."""

    def text(self) -> str:
        if self.found is not None:
            return f"step {self.found.step} ({self.found.name}, written {fmt_age(self.found.age_s)})"
        return self.why_not

    def to_dict(self) -> dict:
        c = self.found
        return {"step": c.step, "name": c.name, "age_s": c.age_s} if c else {"step": None, "why_not": self.why_not}


def newest_fact(checkpoints, now: float) -> CheckpointFact | None:
    """The complete checkpoint with the highest step (an incomplete one is never safe)."""
    done = [c for c in checkpoints if c.complete]
    if not done:
        return None
    newest = max(done, key=lambda c: c.step)
    return CheckpointFact(newest.name, newest.step, max(0.0, now - newest.mtime))


RECORD = "safe-step.json"
"""The newest complete checkpoint as the run's owner found it when the run ended."""


def save_safe_step(directory: Path, fact: CheckpointFact, now: float) -> None:
    data = {"name": fact.name, "step": fact.step, "written_at": now - (fact.age_s or 0.0)}
    (directory / RECORD).write_text(json.dumps(data))


def recorded_safe_step(directory: Path, now: float) -> SafeStep | None:
    """What the owner recorded at the run's end (``None``: nothing recorded: none found, or the node did
    not answer then)."""
    try:
        data = json.loads((directory / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return SafeStep(CheckpointFact(data["name"], data["step"], max(0.0, now - data["written_at"])))


async def last_safe_step(home: Path, run_id: str, timeout_s: float = 15.0) -> SafeStep | None:
    """``None`` for a run without ``parameters.output_dir`` (its script keeps its own checkpoints). An ended
    run's comes from what its owner recorded (no node is asked); a live run's node is asked."""
    from launcher.paths import run_dir
    from launcher.runs.core.store import RunStore

    record = RunStore(home).get_run(run_id)
    if record is not None and record.summary.state.is_final and record.summary.output_dir:
        recorded = recorded_safe_step(run_dir(home, run_id), time.time())
        if recorded is not None:
            return recorded
    try:
        listing = await asyncio.wait_for(list_checkpoints(home, run_id), timeout_s)
    except NoOutputDir:
        return None
    except asyncio.TimeoutError:
        return SafeStep(None, f"the node holding the checkpoints did not answer within {timeout_s:g}s")
    except Exception as err:  # noqa: BLE001 - shown as what it is, never a traceback
        return SafeStep(None, f"cannot list the checkpoints: {err}")
    if listing.error:
        return SafeStep(None, f"cannot list the checkpoints on {listing.label}: {listing.error}")
    found = newest_fact(listing.checkpoints, time.time())
    return SafeStep(found, "" if found else NONE_YET)


async def newest_of_run(home: Path, run_id: str, timeout_s: float = 20.0) -> CheckpointFact | None:
    """The newest complete checkpoint of a run where its whole copies are; ``None`` when there is none,
    the run has no ``output_dir`` or its holder does not answer in time."""
    try:
        listing = await asyncio.wait_for(list_checkpoints(home, run_id), timeout_s)
    except (NoOutputDir, LookupError, OSError, ValueError, asyncio.TimeoutError):
        return None
    return None if listing.error else newest_fact(listing.checkpoints, time.time())


_CHECKPOINT_TIME = re.compile(r"checkpoint blocked training for ([0-9]+(?:\.[0-9]+)?) s")
LEAD_MARGIN = 0.8
"""A checkpoint longer than this share of the lead time may not finish before the scheduler kills the job."""


def checkpoint_seconds(log_text: str) -> list[float]:
    """How long each checkpoint of the built-in trainer held training up (its own log lines)."""
    return [float(m.group(1)) for m in _CHECKPOINT_TIME.finditer(log_text)]


def lead_time_note(seconds: list[float], lead_s: int) -> str:
    """A SLURM job is signalled ``signal_lead_s`` before its time limit to save and stop: say how that
    compares with the checkpoints measured so far ("" before the first)."""
    if not seconds:
        return ""
    longest = max(seconds)
    note = (f"checkpoints took up to {longest:.0f}s; the time-limit signal comes {lead_s}s before the limit "
            "(compute.slurm.signal_lead_s)")
    if longest > LEAD_MARGIN * lead_s:
        note += f": too close, raise it above {longest / LEAD_MARGIN:.0f}s or the last save may be cut off"
    return note


def lead_time_of_run(directory: Path, workload: dict) -> str:
    """:func:`lead_time_note` for a SLURM run from node 0's log mirror; "" for other runs."""
    slurm = (workload.get("compute") or {}).get("slurm")
    if not slurm:
        return ""
    log = directory / "nodes" / "0.log"
    try:
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - (4 << 20)))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return lead_time_note(checkpoint_seconds(text), int(slurm.get("signal_lead_s", 120)))
