"""A sweep's variants and their problems, shared by ``validate``, the editor and ``fsdp-tui sweep``.

A variant is a set of ``--set`` overrides (its settings); each is checked by validating the workload
with them, and a problem is placed at the line of the ``sweep:`` section (or the ``--over``) that asked
for the value, so the same file gives the same problems at the same lines wherever it is checked.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from launcher.words import plural
from launcher.workload.model import Sweep
from launcher.workload.overrides import SOURCE as SET_SOURCE
from launcher.workload.overrides import parse_path
from launcher.workload.problems import Problem, format_path
from launcher.workload.yaml_loader import LoadedYaml

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
    """Where the value was written."""
    axis: Origin | None = None
    """Where its key was written, when that is elsewhere (a grid axis)."""

    @property
    def override(self) -> str:
        return f"{self.key}={show_value(self.value)}"


def show_value(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def short_key(key: str) -> str:
    path = parse_path(key)
    return str(path[-1]) if path else key


def origins(loaded: LoadedYaml | None, filename: str, spec: Sweep) -> dict[tuple, Origin]:
    """The file position of every grid axis and value and every variant key (line-accurate problems)."""

    def at(path: tuple, key: str, *, is_key: bool = False) -> Origin:
        if loaded is None:
            return Origin(filename, 1, 1, key)
        line, col = loaded.mark(path, key=is_key)
        return Origin(filename, line, col, format_path(path))

    out: dict[tuple, Origin] = {}
    for key, values in spec.grid.items():
        out[("grid", key)] = at(("sweep", "grid", key), key, is_key=True)
        for i in range(len(values)):
            out[("grid", key, i)] = at(("sweep", "grid", key, i), key)
    for i, entry in enumerate(spec.variants):
        for key in entry:
            out[("variants", i, key)] = at(("sweep", "variants", i, key), key, is_key=True)
    return out


MAX_VARIANTS = 1000
"""Variants one sweep may have: each is validated, planned and launched as a run of its own, so a grid
whose product is in the millions is refused where it is written instead of expanded."""


def too_many(spec: Sweep, where: Origin, over: dict[str, tuple[list[Any], Origin]] | None = None) -> Problem | None:
    """The problem of a sweep with more than :data:`MAX_VARIANTS` variants (counted, never built)."""
    sizes = {key: len(values) for key, values in spec.grid.items()}
    sizes.update({key: len(values) for key, (values, _o) in (over or {}).items()})
    count = max(1, len(spec.variants))
    for size in sizes.values():
        count *= size
        if count > MAX_VARIANTS:
            return Problem(where.source, where.line, where.col, "sweep", "error",
                           f"the sweep has more than {plural(MAX_VARIANTS, 'variant')} ("
                           + " x ".join(str(n) for n in [max(1, len(spec.variants)), *sizes.values()]) + ")",
                           "sweep fewer values, or split it into several sweeps")
    return None


def expand(spec: Sweep, where: dict[tuple, Origin],
           over: dict[str, tuple[list[Any], Origin]] | None = None) -> list[tuple[Setting, ...]]:
    """Every variant's settings: each ``variants`` entry crossed with every point of the grid (the
    file's ``grid`` with ``--over`` axes added or replacing the file's axis of the same key)."""
    axes: dict[str, list[tuple[Any, Origin]]] = {}
    for key, values in spec.grid.items():
        axes[key] = [(v, where.get(("grid", key, i)) or where[("grid", key)]) for i, v in enumerate(values)]
    for key, (values, origin) in (over or {}).items():
        axes[key] = [(v, origin) for v in values]
    sets = [tuple(Setting(k, v, where[("variants", i, k)]) for k, v in entry.items())
            for i, entry in enumerate(spec.variants)] or [()]
    axis_at = {key: where[("grid", key)] for key in spec.grid}
    grid = [tuple(Setting(k, v, o, axis_at.get(k)) for k, (v, o) in zip(axes, point, strict=True))
            for point in itertools.product(*axes.values())]
    return [a + b for a in sets for b in grid]


def shape_problems(spec: Sweep, where: dict[tuple, Origin]) -> list[Problem]:
    """What makes a sweep section give no variant at all: an axis with no values."""
    out = []
    for key, values in spec.grid.items():
        if not values:
            o = where[("grid", key)]
            out.append(Problem(o.source, o.line, o.col, f"sweep.grid.{key}", "error",
                               f"the axis '{key}' has no values: the grid would have no variant",
                               "list at least one value, or remove the axis"))
    return out


Check = Callable[[Sequence[str]], list[Problem]]
"""Validates the workload with these extra ``--set`` overrides; returns its problems."""


def variant_problems(variants: Sequence[tuple[Setting, ...]], check: Check, first: int,
                     known: Sequence[Problem] = ()) -> list[Problem]:
    """Every variant's own errors, each placed where its value was asked for and said once for all the
    variants that share it (``variants 1, 3 (sharding=half_shard): ...``). ``first`` is the position
    of the variant's first setting among the overrides ``check`` is given (1-based); problems already
    in ``known`` (the workload's own, without the sweep) are not repeated."""
    seen = {p.format() for p in known}
    groups: dict[tuple, list[int]] = {}
    shapes: dict[tuple, Problem] = {}
    axes: dict[tuple, Setting] = {}
    for index, settings in enumerate(variants, start=1):
        for p in check([s.override for s in settings]):
            if not p.is_error or p.format() in seen:
                continue
            setting, exact = _setting_of(p, settings, first)
            if setting is None:
                key = ("", p.file, p.line, p.column, p.path, p.message, p.hint)
                shapes[key] = p
            else:
                o = setting.origin
                message = p.message if exact else f"{p.path}: {p.message}"
                key = (setting.override, o.source, o.line, o.col, setting.key, message, p.hint)
                axes[key] = setting
            groups.setdefault(key, []).append(index)
    groups = _by_key_where_values_agree(groups, axes)
    out = []
    for key, indices in groups.items():
        which = f"variant {indices[0]}" if len(indices) == 1 else f"variants {variant_list(indices)}"
        if key[0] == "":
            p = shapes[key]
            out.append(Problem(p.file, p.line, p.column, p.path, "error", f"{which}: {p.message}", p.hint,
                               p.origin))
        else:
            override, source, line, col, path, message, hint = key
            out.append(Problem(source, line, col, path, "error", f"{which} ({override}): {message}", hint))
    return out


def _by_key_where_values_agree(groups: dict[tuple, list[int]], axes: dict[tuple, Setting]) -> dict[tuple, list[int]]:
    """A problem that every value of one axis gives (an unknown key) is the key's: said once, at the key."""
    by_key: dict[tuple, list[tuple]] = {}
    for key in groups:
        if key[0]:
            by_key.setdefault((key[4], key[5], key[6]), []).append(key)
    out = dict(groups)
    for (name, message, hint), keys in by_key.items():
        axis = axes[keys[0]].axis
        if len(keys) < 2 or axis is None:
            continue
        indices = sorted({i for k in keys for i in out.pop(k)})
        out[(name, axis.source, axis.line, axis.col, name, message, hint)] = indices
    return out


def _setting_of(p: Problem, settings: tuple[Setting, ...], first: int) -> tuple[Setting | None, bool]:
    """The setting a variant's problem comes from, and whether it is that setting's own key (else one of
    the same section, e.g. ``compute.procs_per_node=3`` for ``compute.num_accelerators``)."""
    j = p.line - first if p.file == SET_SOURCE else -1
    if 0 <= j < len(settings):
        return settings[j], True
    if not p.path:
        return None, False
    same = next((s for s in settings if p.path.startswith(s.key) or s.key.startswith(p.path)), None)
    if same is not None:
        return same, True
    section = p.path.split(".", 1)[0].split("[", 1)[0]
    near = next((s for s in settings if s.key.split(".", 1)[0] == section), None)
    return near, False


def variant_list(indices: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``1-3, 5``."""
    out: list[str] = []
    start = prev = indices[0]
    for i in [*indices[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(out)
