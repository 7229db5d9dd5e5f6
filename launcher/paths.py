"""Where fsdp-tui keeps things on the operator's machine."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

HOME_ENV = "FSDP_TUI_HOME"


def data_home() -> Path:
    """Run store, run records, MLflow database, secrets: ``$FSDP_TUI_HOME`` or the XDG data dir."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "fsdp-tui"


def config_home() -> Path:
    """Settings and user themes: ``$FSDP_TUI_HOME`` too when set, else the XDG config dir."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "fsdp-tui"


def ssh_config_path() -> Path:
    """The OpenSSH client config: what the SSH backend resolves hosts with, the editor completes from."""
    return Path.home() / ".ssh" / "config"


def run_dir(home: Path, run_id: str) -> Path:
    """One run's local record: resolved workload, node log mirrors, metrics, events, triage."""
    return home / "runs" / run_id


def new_run_id(experiment: str) -> str:
    """Short, unique, sortable by start time: ``20261122-1130-tiny-cpu-demo-3f9a``."""
    slug = "".join(ch if ch.isalnum() else "-" for ch in experiment.lower()).strip("-")[:32] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"
