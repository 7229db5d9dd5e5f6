"""The app's few persistent choices (the theme), in ``<config dir>/settings.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path


def settings_path() -> Path:
    from launcher.paths import settings_file

    return settings_file()


def load() -> dict:
    try:
        data = json.loads(settings_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(**changes) -> None:
    path = settings_path()
    data = {**load(), **changes}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)
