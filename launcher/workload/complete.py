"""Completion while a workload is typed: what may go at the cursor, from the same models that
``fsdp-tui schema`` prints. Works on text that does not parse yet (only indentation is read).

Keys valid at the cursor's path (with their one-line help), the allowed values of a field, host
aliases for ``compute.hosts`` and ``compute.slurm.login``, secret names for ``secrets``, folders for ``root_path``,
and for the built-in trainer's ``model_name`` and ``dataset_name``: the built-in names, the hub names the docs
use, and local model folders, data files and saved datasets (a typed path is completed in its folder).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from launcher.workload import schema_walk
from launcher.workload.cursor import key_path_at
from launcher.workload.known_names import HUB_DATASETS, HUB_MODELS
from trainer.wire import builtin_assets
from trainer.wire.data_files import SUFFIXES, is_saved_folder

MAX_ITEMS = 40


@dataclass(frozen=True)
class Completion:
    """One candidate: ``label`` is shown, ``insert`` replaces the word before the cursor."""

    label: str
    insert: str
    help: str = ""


@dataclass(frozen=True)
class Completions:
    """Candidates for the word that starts at column ``start`` of line ``row`` and ends at the cursor."""

    row: int
    start: int
    items: tuple[Completion, ...]


@dataclass(frozen=True)
class Sources:
    """What completion knows beyond the schema; each is read by the caller (the app), off the UI thread."""

    hosts: Sequence[str] = ()
    """Host aliases from ``~/.ssh/config``."""
    secrets: Sequence[str] = ()
    """``scope/key`` names in the local secret store."""
    folders: Callable[[str], Sequence[str]] | None = None
    """Folders matching a typed prefix, relative to the workload file."""
    entries: Callable[[str], Sequence[Entry]] | None = None
    """What a folder holds (:func:`read_entries`), the folder as written: relative to the workload file,
    absolute, or ``~/...``."""


EntryKind = Literal["folder", "model folder", "saved dataset", "data file"]


@dataclass(frozen=True)
class Entry:
    """One thing in a folder, as completion offers it."""

    name: str
    kind: EntryKind


MAX_ENTRIES = 200
"""Entries read from one folder (a folder of many thousand files is cut, not listed whole)."""


def read_entries(base: Path, folder: str) -> list[Entry]:
    """The folders, model folders (a ``config.json``), saved datasets and data files (json, jsonl, csv,
    parquet, arrow) in ``folder`` (relative to ``base``, absolute, or ``~/...``); hidden ones left out.
    Reads the disk: the caller runs it where blocking is fine."""
    where = Path(os.path.expanduser(folder or "."))
    where = where if where.is_absolute() else base / where
    out: list[Entry] = []
    try:
        with os.scandir(where) as found:
            for i, item in enumerate(found):
                if i >= MAX_ENTRIES:
                    break
                if item.name.startswith("."):
                    continue
                path = Path(item.path)
                if item.is_dir():
                    kind: EntryKind = ("model folder" if (path / "config.json").is_file()
                                       else "saved dataset" if is_saved_folder(path) else "folder")
                    out.append(Entry(item.name, kind))
                elif path.suffix.lower() in SUFFIXES:
                    out.append(Entry(item.name, "data file"))
    except OSError:
        return []
    return sorted(out, key=lambda e: e.name)


def complete(text: str, row: int, col: int, sources: Sources = Sources()) -> Completions | None:
    """Candidates at ``(row, col)`` (0-based), or ``None`` where nothing is completed."""
    lines = text.split("\n")
    if row >= len(lines):
        return None
    before = lines[row][:col]
    stripped = before.lstrip()
    indent = len(before) - len(stripped)
    if stripped.startswith("#"):
        return None
    data = {"command": "x"} if re.search(r"^command\s*:", text, re.M) else None
    if stripped.startswith("- ") or stripped == "-":
        owner = _owner(lines, row, indent, list_item=True)
        word = stripped[1:].lstrip()
        return _finish(row, col, word, _values(owner, data, sources, word, list_item=True))
    if ":" in stripped:
        key, _, value = stripped.partition(":")
        if "#" in value:
            return None
        word = value.lstrip()
        path = _owner(lines, row, indent) + (key.strip().strip("'\""),)
        return _finish(row, col, word, _values(path, data, sources, word))
    if not re.fullmatch(r"[A-Za-z0-9_]*", stripped):
        return None
    parent = _owner(lines, row, indent)
    taken = _siblings(lines, row, indent)
    keys = [k for k in schema_walk.keys_at(parent, data) if k not in taken]
    return _finish(row, col, stripped, [_key_item(parent + (k,), k, data) for k in keys])


def _finish(row: int, col: int, word: str, items: list[Completion]) -> Completions | None:
    lowered = "" if re.fullmatch(r"<[^>]*>?", word) else word.lower()  # a template's blank: replace it
    first = [i for i in items if i.label.lower().startswith(lowered)]
    then = [i for i in items if lowered in i.label.lower() and i not in first]
    ranked = tuple((first + then)[:MAX_ITEMS])
    if not ranked or (len(ranked) == 1 and ranked[0].insert.rstrip(": ") == word):
        return None
    return Completions(row, col - len(word), ranked)


def _key_item(path: tuple[str, ...], key: str, data: dict | None) -> Completion:
    info = schema_walk.help_for(path, data)
    nested = info is not None and (info.type_name == "mapping" or schema_walk.holds_many(path, data))
    summary = info.description.split(". ")[0].rstrip(".") if info else ""
    if info is not None and not nested and info.default not in ("not set", "none"):
        summary = f"default {info.default}" + (f". {summary}" if summary else "")
    return Completion(key, f"{key}:" if nested else f"{key}: ", summary)


def _values(path: tuple[str, ...], data: dict | None, sources: Sources, word: str,
            *, list_item: bool = False) -> list[Completion]:
    if path == ("compute", "hosts") and list_item:
        return [Completion(h, h, "from ~/.ssh/config") for h in sources.hosts]
    if path == ("compute", "slurm", "login") and not list_item:
        return [Completion("local", "local", "fsdp-tui runs on the login node")] + [
            Completion(h, h, "from ~/.ssh/config") for h in sources.hosts]
    if len(path) == 2 and path[0] == "secrets":
        return [Completion(s, s, "in the local secret store") for s in sources.secrets]
    if path[-1:] == ("root_path",) and sources.folders is not None:
        return [Completion(f, f, "folder") for f in sources.folders(word)]
    if path in (("parameters", "model_name"), ("parameters", "dataset_name")) and data is None and not list_item:
        return _model_or_data(path[-1], word, sources)
    if list_item:
        return []
    info = schema_walk.help_for(path, data)
    if info is None:
        return []
    if info.choices:
        return [Completion(c, c, info.path) for c in info.choices]
    if info.type_name in ("bool", "bool | None"):
        return [Completion(v, v, info.path) for v in ("true", "false")]
    if info.path == "compute.accelerator_type":
        return [Completion(v, v, "accelerator type") for v in ("CPU", "GPU_8xH100", "GPU_8xA100", "GPU_1xA10G")]
    return []


def _owner(lines: list[str], row: int, indent: int, *, list_item: bool = False) -> tuple[str, ...]:
    """Key path of the mapping that a line at ``indent`` belongs to (a list item's list key)."""
    for r in range(row - 1, -1, -1):
        line = lines[r]
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#") or ":" not in stripped:
            continue
        other = len(line) - len(stripped)
        if other < indent or (list_item and other == indent and not stripped.startswith("-")):
            return key_path_at("\n".join(lines[: r + 1]), r)
    return ()


def _siblings(lines: list[str], row: int, indent: int) -> set[str]:
    """Keys already written in the same mapping, so they are not offered again."""
    out: set[str] = set()
    for step in (-1, 1):
        r = row + step
        while 0 <= r < len(lines):
            line = lines[r]
            stripped = line.lstrip()
            r += step
            if not stripped or stripped.startswith("#"):
                continue
            other = len(line) - len(stripped)
            if other < indent:
                break
            if other == indent and ":" in stripped and not stripped.startswith("-"):
                out.add(stripped.split(":", 1)[0].strip())
    return out


_PATH_START = ("/", "~", "./", "../")


def _model_or_data(key: str, word: str, sources: Sources) -> list[Completion]:
    """``model_name`` or ``dataset_name``: a typed path is completed in its folder; otherwise the built-in
    names, the hub names the docs use, then what the workload's folder holds (as ``./name``: a relative
    path is read in the code snapshot, which a ``code_source`` ships from there)."""
    models = key == "model_name"
    wanted: tuple[EntryKind, ...] = ("model folder",) if models else ("data file", "saved dataset")
    if word.startswith(_PATH_START) or word in (".", "..", "~"):
        folder = word.rpartition("/")[0] + "/" if "/" in word else word + "/"  # "~" is "~/"
        return _local(sources, folder, folder, wanted)
    builtins = builtin_assets.MODELS if models else builtin_assets.DATASETS
    hub = HUB_MODELS if models else HUB_DATASETS
    out = [Completion(f"{builtin_assets.PREFIX}{name}", f"{builtin_assets.PREFIX}{name}", f"built in: {what}")
           for name, what in builtins.items()]
    out += [Completion(name, name, f"hub: {what}") for name, what in hub.items()]
    return out + _local(sources, ".", "./", wanted)


def _local(sources: Sources, folder: str, written: str, wanted: tuple[EntryKind, ...]) -> list[Completion]:
    if sources.entries is None:
        return []
    found = sources.entries(folder)
    fits = [e for e in found if e.kind in wanted]
    below = [e for e in found if e.kind == "folder" or (e.kind not in wanted and e.kind != "data file")]
    return ([Completion(written + e.name, written + e.name, e.kind) for e in fits]
            + [Completion(written + e.name + "/", written + e.name + "/", "folder") for e in below])
