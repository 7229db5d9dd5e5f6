"""The ``prices`` of the user's settings (``<config dir>/settings.json``), as every usage figure reads them:
the run list prices each run it shows. The file is read as JSON first; the settings' models
(:mod:`launcher.runs.core.user_settings`, pydantic) are loaded only when it sets prices, so a listing
without prices never pays for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.paths import settings_file

if TYPE_CHECKING:
    from launcher.runs.core.user_settings import Prices


def prices_set(path: Path | None = None) -> Prices | None:
    """The settings' prices; ``None`` when none are set, or when the settings cannot be read (a price is
    advice: an unreadable file makes no figure fail; ``fsdp-tui notify test`` says what is wrong with it)."""
    path = path or settings_file()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("prices") is None:
        return None
    from launcher.runs.core.user_settings import SettingsError, load_user_settings

    try:
        return load_user_settings(path).prices
    except SettingsError:
        return None
