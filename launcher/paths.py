"""Where fsdp-tui keeps things on the operator's machine."""

from __future__ import annotations

import os
import secrets
import shlex
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


def settings_file() -> Path:
    """The user's settings, one file: the app's theme, and the defaults of every run (``notify``, ``prices``)."""
    return config_home() / "settings.json"


def ssh_config_path() -> Path:
    """The OpenSSH client config: what the SSH backend resolves hosts with, the editor completes from."""
    return Path.home() / ".ssh" / "config"


PRIVATE_UMASK = 0o077
_USER_UMASK: list[int] = []
"""The umask the process had before :func:`private_files` (what the user's own processes get back)."""


def private_files() -> None:
    """Everything this process creates from now on is its user's alone (folders 0700, files 0600),
    whatever the umask: what the run's owner and a sweep's driver write holds logs with prompts, data
    and paths. The processes it starts for the user (a job on this machine, a notify command) get the
    user's umask back through :func:`user_umask`."""
    if not _USER_UMASK:
        _USER_UMASK.append(os.umask(PRIVATE_UMASK))


def user_umask() -> int:
    """The user's own umask, for processes started for the user (see :func:`private_files`)."""
    if _USER_UMASK:
        return _USER_UMASK[0]
    mask = os.umask(PRIVATE_UMASK)
    os.umask(mask)
    return mask


def private_dir(path: Path) -> Path:
    """``path`` as a folder, created owner-only (0700) when missing: the data dir and each run's record.
    An existing folder keeps its mode (a user who shares it on purpose keeps it shared)."""
    path = Path(path)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    return path


def private_file(path: Path) -> Path:
    """``path`` created empty and owner-only (0600) when missing, so whatever opens it next (SQLite, which
    gives its WAL and shared-memory files the database's mode) keeps it private."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    return path


def run_dir(home: Path, run_id: str) -> Path:
    """One run's local record: resolved workload, node log mirrors, metrics, events, triage."""
    return home / "runs" / run_id


def new_run_id(experiment: str) -> str:
    """Short, unique, sortable by start time: ``20261122-1130-tiny-cpu-demo-3f9a``."""
    slug = "".join(ch if ch.isalnum() else "-" for ch in experiment.lower()).strip("-")[:32] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def shell_path(path: str) -> str:
    """A path as a shell takes it (pasted, or run on a node over SSH): a leading ``~/`` stays outside the
    quotes, so the shell expands the home, the rest is quoted once (``~/x y`` -> ``~/'x y'``)."""
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])
    return shlex.quote(path)
