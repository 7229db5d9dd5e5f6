"""A sweep's record in the data dir, beside the runs: ``sweeps/<sweep_id>/sweep.json`` (written by the
sweep's driver only, replaced whole) and one plan file per variant. The variants' runs are ordinary
runs in the run store; the record names them."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from launcher.paths import new_run_id
from launcher.words import plural
from trainer.wire.json_value import JsonValue

SweepState = Literal["pending", "running", "succeeded", "failed", "cancelling", "cancelled"]
VariantState = Literal["pending", "running", "succeeded", "failed", "cancelled", "timed_out", "skipped"]
FINAL_SWEEP = ("succeeded", "failed", "cancelled")
RECORD = "sweep.json"
CANCEL = "cancel"
LOCK = "driver.lock"
SWEEP_TAG = "fsdp_tui.sweep_id"
"""Every MLflow run of a sweep: its parent and each variant's."""
SWEEP_PARENT_TAG = "fsdp_tui.sweep_parent"
"""The sweep's parent MLflow run alone: what a restarted driver finds it by."""
PARENT_TAG = "mlflow.parentRunId"


@dataclass(frozen=True)
class VariantRecord:
    index: int
    label: str
    """The varied values, short: ``sharding=no_shard``."""
    values: dict[str, JsonValue]
    """Dotted key -> value, as the overrides set them (YAML scalars and lists, as the user wrote them)."""
    overrides: list[str]
    run_id: str
    """Chosen when the sweep is planned, so every variant's run is known before it starts."""
    state: VariantState = "pending"
    detail: str = ""


@dataclass(frozen=True)
class SweepRecord:
    sweep_id: str
    experiment: str
    file: str
    sets: list[str]
    parallel: int
    on_failure: Literal["continue", "stop"]
    variants: list[VariantRecord]
    state: SweepState = "pending"
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    ended_at: float | None = None
    driver_pid: int | None = None
    mlflow_parent: str | None = None
    detail: str = ""

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_SWEEP

    def variant(self, run_id: str) -> VariantRecord | None:
        return next((v for v in self.variants if v.run_id == run_id), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepRecord:
        variants = [VariantRecord(**v) for v in data.pop("variants")]
        return cls(variants=variants, **data)

    def with_variant(self, index: int, **changes: Any) -> SweepRecord:
        return replace(self, variants=[replace(v, **changes) if v.index == index else v for v in self.variants])


def new_sweep_id(experiment: str) -> str:
    return "sweep-" + new_run_id(experiment)


def sweeps_root(home: Path) -> Path:
    return Path(home) / "sweeps"


def sweep_dir(home: Path, sweep_id: str) -> Path:
    return sweeps_root(home) / sweep_id


def save_sweep(home: Path, record: SweepRecord) -> None:
    directory = sweep_dir(home, record.sweep_id)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{RECORD}.tmp"
    tmp.write_text(json.dumps(record.to_dict(), indent=1))
    os.replace(tmp, directory / RECORD)


def load_sweep(home: Path, sweep_id: str) -> SweepRecord:
    path = sweep_dir(home, sweep_id) / RECORD
    try:
        return SweepRecord.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise LookupError(f"no sweep '{sweep_id}' (see fsdp-tui sweeps)") from None
    except (ValueError, TypeError) as err:
        raise LookupError(f"{path}: not a sweep record: {err}") from None


def list_sweeps(home: Path) -> list[SweepRecord]:
    """Newest first; unreadable records are left out."""
    root = sweeps_root(home)
    out = []
    for path in sorted(root.glob(f"*/{RECORD}")) if root.is_dir() else []:
        try:
            out.append(load_sweep(home, path.parent.name))
        except LookupError:
            continue
    return sorted(out, key=lambda s: s.created_at, reverse=True)


def find_sweep(home: Path, prefix: str) -> str:
    """The sweep whose id starts with ``prefix`` (with or without ``sweep-``) or ends with it."""
    ids = [s.sweep_id for s in list_sweeps(home)]
    if prefix in ids:
        return prefix
    hits = [i for i in ids if i.startswith(prefix) or i.startswith("sweep-" + prefix) or i.endswith("-" + prefix)]
    if not hits:
        raise LookupError(f"no sweep '{prefix}' (see fsdp-tui sweeps)")
    if len(hits) > 1:
        raise LookupError(f"'{prefix}' matches {plural(len(hits), 'sweep')}: {', '.join(hits[:5])}")
    return hits[0]


def request_cancel(home: Path, sweep_id: str) -> None:
    (sweep_dir(home, sweep_id) / CANCEL).write_text(str(time.time()))


def cancel_requested(home: Path, sweep_id: str) -> bool:
    return (sweep_dir(home, sweep_id) / CANCEL).exists()
