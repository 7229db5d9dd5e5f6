"""Themes as data: built-in TOML files here, user files in ``<config dir>/themes/*.toml``.

A theme file holds ``textual.theme.Theme`` fields plus a ``[variables]`` table for the app's own
CSS variables. A bad file is reported and skipped; the app keeps its current theme.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib

BUILTIN_DIR = Path(__file__).parent
DEFAULT_THEME = "fsdp-dark"
APP_VARIABLES = {"gauge-ok": "$success", "gauge-warn": "$warning", "gauge-crit": "$error", "log-error": "$error"}
_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground", "background",
           "surface", "panel", "boost", "dark")


@dataclass(frozen=True)
class ThemeSpec:
    name: str
    fields: dict
    variables: dict
    source: Path


def load_theme_file(path: Path) -> ThemeSpec:
    """Parse one theme file; ``ValueError`` names the file and what is wrong."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ValueError(f"{path}: {err}") from None
    if not isinstance(data.get("name"), str) or not isinstance(data.get("primary"), str):
        raise ValueError(f"{path}: a theme needs at least 'name' and 'primary'")
    unknown = set(data) - set(_FIELDS) - {"name", "variables"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)} (allowed: {', '.join(_FIELDS)}, variables)")
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ValueError(f"{path}: [variables] must map names to colour strings")
    return ThemeSpec(data["name"], {k: data[k] for k in _FIELDS if k in data}, variables, path)


def discover(user_dir: Path | None) -> tuple[list[ThemeSpec], list[str]]:
    """Built-in themes, then the user's (which may replace a built-in by name); and the errors."""
    specs: dict[str, ThemeSpec] = {}
    errors: list[str] = []
    dirs = [BUILTIN_DIR] + ([user_dir] if user_dir and user_dir.is_dir() else [])
    for folder in dirs:
        for path in sorted(folder.glob("*.toml")):
            try:
                spec = load_theme_file(path)
            except ValueError as err:
                errors.append(str(err))
                continue
            specs[spec.name] = spec
    return list(specs.values()), errors
