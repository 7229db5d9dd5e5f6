"""The last safe step: the run's own newest complete checkpoint (what a relaunch resumes from; another
run's never, :mod:`trainer.wire.ckpt_owner`) and how long ago it was written. Shown by ``fsdp-tui show``
and the run monitor, and sent in notifications.

The run's owner records it (``safe-step.json``) after each gather that makes a checkpoint whole and at
the run's end, so the monitor follows a gathered save within a second by reading a file here, no node
asked; a live run whose checkpoints are not gathered is asked of the node that holds them. The age is
counted when it is shown (:meth:`SafeStep.text`), never frozen at the time of asking."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.notify.summary import CheckpointFact
from launcher.runs.core.layout import read_json, write_whole
from launcher.words import fmt_age

if TYPE_CHECKING:
    from launcher.runs.core.checkpoints import RunCheckpoints

# A node is asked through :mod:`launcher.runs.core.checkpoints` (the backends, the workload's models),
# imported where a node is asked: a recorded safe step is read without them.

NONE_YET = "no complete checkpoint of its own yet"
"""What the holder said: it answered, and none of the run's own checkpoints is whole."""


@dataclass(frozen=True)
class SafeStep:
    found: CheckpointFact | None
    why_not: str = ""
    """Why there is no step to show: none complete yet, or the node could not be asked (and why)."""
    written_at: float | None = None
    """When the checkpoint was written (its newest file's time): its age is counted from it when shown."""

    def text(self, now: float | None = None) -> str:
        if self.found is not None:
            return f"step {self.found.step} ({self.found.name}, written {fmt_age(self.age_s(now))})"
        return self.why_not

    def age_s(self, now: float | None = None) -> float | None:
        if self.written_at is None:
            return self.found.age_s if self.found is not None else None
        return max(0.0, (time.time() if now is None else now) - self.written_at)

    def to_dict(self) -> dict:
        c = self.found
        return ({"step": c.step, "name": c.name, "age_s": self.age_s()} if c
                else {"step": None, "why_not": self.why_not})


def own_safe(listing: RunCheckpoints, now: float) -> SafeStep:
    """The run's safe step from its listing (its own whole checkpoints only)."""
    safe = listing.safe()
    if safe is None:
        return SafeStep(None, NONE_YET)
    return SafeStep(CheckpointFact(safe.name, safe.step, max(0.0, now - safe.mtime)), written_at=safe.mtime)


RECORD = "safe-step.json"
"""The run's own newest complete checkpoint as its owner last found it (after a gather, at the end)."""


def save_safe_step(directory: Path, fact: CheckpointFact, now: float) -> None:
    data = {"name": fact.name, "step": fact.step, "written_at": now - (fact.age_s or 0.0)}
    write_whole(directory / RECORD, json.dumps(data))


def recorded_safe_step(directory: Path, now: float) -> SafeStep | None:
    """What the owner recorded (``None``: nothing recorded: none found yet, or the node did not answer)."""
    data = read_json(directory / RECORD)
    if not isinstance(data, dict):
        return None
    try:
        written_at = float(data["written_at"])
        fact = CheckpointFact(str(data["name"]), int(data["step"]), max(0.0, now - written_at))
    except (ValueError, KeyError, TypeError):
        return None
    return SafeStep(fact, written_at=written_at)


def _gathered(home: Path, run_id: str) -> bool:
    """The run's checkpoints are gathered by its owner (it records each whole one as it comes)."""
    from launcher.paths import run_dir
    from launcher.runs.core.layout import load_plan

    try:
        place = load_plan(run_dir(home, run_id)).ckpt_place
    except (OSError, ValueError, KeyError):
        return False
    return place is not None and place.gathers


def known_safe_step(home: Path, run_id: str) -> tuple[bool, SafeStep | None]:
    """What :func:`last_safe_step` answers without asking a node, and whether that is its answer: ``None``
    for a run without ``output_dir``; what its owner recorded for an ended run, or a gathered live one.
    ``(False, None)``: only the node that holds the checkpoints can say."""
    from launcher.paths import run_dir
    from launcher.runs.core.store import RunStore

    record = RunStore(home).get_run(run_id)
    if record is None:
        return False, None
    if not record.summary.output_dir:
        return True, None  # as the listing would say (NoOutputDir, from the same record), without its modules
    final = record.summary.state.is_final
    if final or _gathered(home, run_id):
        recorded = recorded_safe_step(run_dir(home, run_id), time.time())
        if recorded is not None:
            return True, recorded
        if not final:
            return True, SafeStep(None, NONE_YET)  # its owner records each gathered one as it comes
    return False, None


async def last_safe_step(home: Path, run_id: str, timeout_s: float = 15.0, *,
                         ask_node: bool = True) -> SafeStep | None:
    """``None`` for a run without ``parameters.output_dir`` (its script keeps its own checkpoints). An ended
    run's, and a gathered live run's, come from what its owner recorded (no node is asked); another live
    run's node is asked, unless not ``ask_node`` (then ``None``)."""
    known, answer = known_safe_step(home, run_id)
    if known or not ask_node:
        return answer
    import asyncio

    from launcher.runs.core.checkpoints import NoOutputDir, list_checkpoints

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
    return own_safe(listing, time.time())


async def newest_of_run(home: Path, run_id: str, timeout_s: float = 20.0) -> CheckpointFact | None:
    """The run's own newest complete checkpoint where its whole copies are; ``None`` when there is none,
    the run has no ``output_dir`` or its holder does not answer in time."""
    import asyncio

    from launcher.runs.core.checkpoints import NoOutputDir, list_checkpoints

    try:
        listing = await asyncio.wait_for(list_checkpoints(home, run_id), timeout_s)
    except (NoOutputDir, LookupError, OSError, ValueError, asyncio.TimeoutError):
        return None
    return None if listing.error else own_safe(listing, time.time()).found


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


def lead_time_of_run(directory: Path, workload: Mapping[str, Any]) -> str:
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
