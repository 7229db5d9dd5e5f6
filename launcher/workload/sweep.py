"""A sweep: one workload, variants of it, each variant a set of ``--set`` overrides planned as a run of
its own. The variants come from the workload's ``sweep:`` section and from ``--over key=v1,v2`` on the
command line; every variant's key paths and values are checked as ``--set`` checks them, and a problem
points at the line of the ``sweep:`` section (or the ``--over``) that asked for it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from launcher.workload.load import Planned, plan_file
from launcher.workload.model import Sweep
from launcher.workload.overrides import SOURCE as SET_SOURCE
from launcher.workload.overrides import parse_path
from launcher.workload.plan import RunPlan
from launcher.workload.problems import Problem, format_path
from launcher.workload.yaml_loader import load_yaml

OVER_SOURCE = "--over"
DROP_SWEEP = "sweep=null"
"""Each variant runs the workload without its ``sweep:`` section (a relaunch runs that one variant)."""


@dataclass(frozen=True)
class Origin:
    """Where one varied value was asked for: a file position with its key, or the N-th ``--over``."""

    source: str
    line: int
    col: int
    key: str


@dataclass(frozen=True)
class Setting:
    key: str
    """Dotted key path, as ``--set`` takes it."""
    value: Any
    origin: Origin

    @property
    def override(self) -> str:
        return f"{self.key}={show_value(self.value)}"


@dataclass(frozen=True)
class Variant:
    index: int
    """1-based, in launch order."""
    settings: tuple[Setting, ...]
    plan: RunPlan | None = None

    @property
    def overrides(self) -> list[str]:
        return [s.override for s in self.settings]

    @property
    def label(self) -> str:
        """``sharding=no_shard procs_per_node=4``: the last part of each key, with its value."""
        return " ".join(f"{_short(s.key)}={show_value(s.value)}" for s in self.settings) or "(as written)"

    @property
    def values(self) -> dict[str, Any]:
        return {s.key: s.value for s in self.settings}


@dataclass(frozen=True)
class SweepPlan:
    file: Path
    sets: tuple[str, ...]
    spec: Sweep
    variants: tuple[Variant, ...]
    problems: list[Problem] = field(default_factory=list)
    base: Planned | None = None

    @property
    def ok(self) -> bool:
        return bool(self.variants) and not any(p.is_error for p in self.problems)

    @property
    def varied_keys(self) -> list[str]:
        return list(dict.fromkeys(s.key for v in self.variants for s in v.settings))


def show_value(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _short(key: str) -> str:
    path = parse_path(key)
    return str(path[-1]) if path else key


def parse_over(index: int, text: str) -> tuple[str, list[Any]] | Problem:
    """``parameters.fsdp.sharding=full_shard,no_shard`` -> the key and its values (YAML scalars)."""
    key, sep, raw = text.partition("=")
    if not sep or parse_path(key.strip()) is None or not raw.strip():
        return Problem(OVER_SOURCE, index, 1, "", "error", f"'{text}' is not key.path=value1,value2,...",
                       "e.g. --over parameters.fsdp.sharding=full_shard,no_shard")
    values = []
    for part in raw.split(","):
        try:
            values.append(yaml.safe_load(part) if part.strip() else "")
        except yaml.YAMLError:
            values.append(part)
    return key.strip(), values


def expand(spec: Sweep, origins: dict[tuple, Origin], over: dict[str, tuple[list[Any], Origin]]) -> list[tuple[Setting, ...]]:
    """Every variant's settings: each ``variants`` entry crossed with every point of the grid (the
    file's ``grid`` with ``--over`` axes added or replacing the file's axis of the same key)."""
    axes: dict[str, list[tuple[Any, Origin]]] = {}
    for key, values in spec.grid.items():
        axes[key] = [(v, origins.get(("grid", key, i)) or origins[("grid", key)]) for i, v in enumerate(values)]
    for key, (values, origin) in over.items():
        axes[key] = [(v, origin) for v in values]
    sets = [tuple(Setting(k, v, origins[("variants", i, k)]) for k, v in entry.items())
            for i, entry in enumerate(spec.variants)] or [()]
    grid = [tuple(Setting(k, v, o) for k, (v, o) in zip(axes, point, strict=True))
            for point in itertools.product(*axes.values())]
    return [a + b for a in sets for b in grid]


def plan_sweep(file: Path, over: Sequence[str] = (), sets: Sequence[str] = (), *, home: Path) -> SweepPlan:
    """Validate the workload (with ``--set``), expand its sweep and plan every variant."""
    file = Path(file)
    base = plan_file(file, sets, home=home)
    spec = (base.result.workload.sweep if base.result.workload else None) or Sweep()
    problems = list(base.problems)
    parsed: dict[str, tuple[list[Any], Origin]] = {}
    for i, text in enumerate(over, start=1):
        got = parse_over(i, text)
        if isinstance(got, Problem):
            problems.append(got)
        else:
            parsed[got[0]] = (got[1], Origin(OVER_SOURCE, i, 1, got[0]))
    if base.plan is None or any(p.is_error for p in problems):
        return SweepPlan(file, tuple(sets), spec, (), problems, base)
    origins = _origins(file, spec)
    variants = []
    for index, settings in enumerate(expand(spec, origins, parsed), start=1):
        planned = plan_file(file, [*sets, DROP_SWEEP, *(s.override for s in settings)], home=home)
        problems += _variant_problems(planned, settings, len(sets) + 1, index)
        variants.append(Variant(index, settings, planned.plan))
    if len(variants) == 1 and not variants[0].settings:
        problems.append(Problem(str(file), 1, 1, "sweep", "error", "nothing to sweep: no sweep.grid, "
                                "sweep.variants or --over", "e.g. --over parameters.fsdp.sharding=full_shard,no_shard"))
    unique = list({p.format(): p for p in problems}.values())
    return SweepPlan(file, tuple(sets), spec, tuple(variants), unique, base)


def _variant_problems(planned: Planned, settings: tuple[Setting, ...], first: int, index: int) -> list[Problem]:
    """A variant's own problems, placed where its values were asked for; the base's are reported once."""
    out = []
    for p in planned.problems:
        if not p.is_error:
            continue
        j = p.line - first - 1 if p.file == SET_SOURCE else -1
        setting = settings[j] if 0 <= j < len(settings) else next(
            (s for s in settings if p.path and (p.path.startswith(s.key) or s.key.startswith(p.path))), None)
        if setting is None:
            out.append(replace(p, message=f"variant {index}: {p.message}"))
            continue
        o = setting.origin
        out.append(Problem(o.source, o.line, o.col, setting.key, "error",
                           f"variant {index} ({setting.override}): {p.message}", p.hint))
    return out


def _origins(file: Path, spec: Sweep) -> dict[tuple, Origin]:
    """The file position of every grid axis and value and every variant key (line-accurate problems)."""
    try:
        loaded = load_yaml(file.read_text(), str(file))
    except OSError:
        loaded = None

    def at(path: tuple, key: str, *, is_key: bool = False) -> Origin:
        if loaded is None:
            return Origin(str(file), 1, 1, key)
        line, col = loaded.mark(path, key=is_key)
        return Origin(str(file), line, col, format_path(path))

    out: dict[tuple, Origin] = {}
    for key, values in spec.grid.items():
        out[("grid", key)] = at(("sweep", "grid", key), key, is_key=True)
        for i in range(len(values)):
            out[("grid", key, i)] = at(("sweep", "grid", key, i), key)
    for i, entry in enumerate(spec.variants):
        for key in entry:
            out[("variants", i, key)] = at(("sweep", "variants", i, key), key, is_key=True)
    return out


SWEEP_NOT_RUN = ("{file} has a sweep: section: run launches the file as written, one run; "
                 "fsdp-tui sweep {file} runs every variant")
"""What ``run`` says (headless and in the app) when the file it launched has a sweep: one behaviour everywhere."""
