"""The user's defaults for every run, from ``<config dir>/settings.json`` (the file the app keeps its
theme in): ``notify`` (the shape of a workload's ``notify:``) and ``prices`` (what a GPU-hour costs).

Read by the run's owner at the end of a run, so a change applies to runs already going."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from launcher.paths import settings_file as settings_file
from launcher.workload.notify import Notify


class Prices(BaseModel):
    """What an hour costs, to turn GPU-hours (CPU-hours) into money. The most specific price wins:
    the host's, then the accelerator model's, then ``gpu_hour`` / ``cpu_hour``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = "USD"
    gpu_hour: float | None = Field(default=None, ge=0)
    """Price of one GPU for one hour."""
    cpu_hour: float | None = Field(default=None, ge=0)
    """Price of one CPU process for one hour (CPU runs)."""
    by_accelerator: dict[str, float] = Field(default_factory=dict)
    """GPU model (``H100``, as in ``GPU_8xH100``) to its price per GPU-hour."""
    by_host: dict[str, float] = Field(default_factory=dict)
    """Host as written in ``compute.hosts`` to its price per GPU-hour (CPU-hour for CPU runs)."""


class UserSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)  # the app keeps its own keys in the same file

    notify: dict[str, Any] | None = None
    prices: Prices | None = None


class SettingsError(ValueError):
    """``settings.json`` has a value that is not understood: the message names the file and the key."""


def load_user_settings(path: Path | None = None) -> UserSettings:
    path = path or settings_file()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return UserSettings()
    except (OSError, ValueError) as err:
        raise SettingsError(f"{path}: not readable as JSON: {err}") from None
    try:
        return UserSettings.model_validate(data if isinstance(data, dict) else {})
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise SettingsError(f"{path}: {key}: {first['msg']}") from None


def effective_notify(workload: Notify | None, settings: UserSettings) -> Notify | None:
    """The settings' ``notify`` with the workload's keys on top, key by key: each key the workload sets to
    other than its default (a recorded plan has every key set); ``None``: nobody to tell."""
    base = dict(settings.notify or {})
    if workload is not None:
        base.update(workload.model_dump(exclude_defaults=True))
    if not base:
        return None
    try:
        merged = Notify.model_validate(base)
    except ValidationError as err:
        first = err.errors()[0]
        raise SettingsError(f"{settings_file()}: notify.{'.'.join(str(p) for p in first['loc'])}: "
                            f"{first['msg']}") from None
    return merged if merged.sinks else None
