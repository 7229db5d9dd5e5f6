"""The workload files the app lists (home screen, command palette): the samples, the YAML files of the current
folder and the files named on the command line, each with a short name for its folder."""

from __future__ import annotations

from pathlib import Path

SAMPLES_ROOT = Path(__file__).resolve().parents[2] / "sample_workloads"


def samples_root() -> Path:
    """``./sample_workloads`` when the current folder has one (the files the README's commands name, maybe
    edited), else the ones shipped with fsdp-tui."""
    here = Path.cwd() / "sample_workloads"
    return here if here.is_dir() else SAMPLES_ROOT


def find_workloads(extra: list[Path]) -> list[Path]:
    """Sample workloads (see ``samples_root``), plus YAML files in the current folder, in the order the
    table shows them: by folder as it is shown, then by file name."""
    root = samples_root()
    found = list(root.rglob("*.yaml")) if root.is_dir() else []
    found += [p for p in Path.cwd().glob("*.y*ml") if p.is_file()]
    found += extra
    unique = dict.fromkeys(p.resolve() for p in found)
    return sorted(unique, key=lambda p: (folder_label(p.parent).lower(), p.name.lower()))


def folder_label(folder: Path) -> str:
    """A short name for a workload's folder: under the shipped samples, the current folder or home."""
    for base, prefix in ((samples_root().parent, ""), (Path.cwd(), "./"), (Path.home(), "~/")):
        if folder == base:
            return prefix.rstrip("/") or "."
        if folder.is_relative_to(base):
            return prefix + str(folder.relative_to(base))
    return str(folder)
