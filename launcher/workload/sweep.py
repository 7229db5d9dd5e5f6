"""A sweep: one workload, variants of it, each variant a set of ``--set`` overrides planned as a run of
its own. The variants come from the workload's ``sweep:`` section and from ``--over key=v1,v2`` on the
command line; every variant's key paths and values are checked as ``--set`` checks them, and a problem
points at the line of the ``sweep:`` section (or the ``--over``) that asked for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.workload import sweep_outputs
from launcher.workload.load import Planned, plan_file
from launcher.workload.model import Sweep
from launcher.workload.overrides import parse_path
from launcher.workload.plan import RunPlan
from launcher.workload.problems import Problem
from launcher.workload.sweep_check import (
    DROP_SWEEP,
    Origin,
    Setting,
    expand,
    origins,
    short_key,
    show_value,
    too_many,
    variant_problems,
)
from launcher.workload.yaml_loader import MAX_VALUES, LoadedYaml, load_value, load_yaml

__all__ = ["DROP_SWEEP", "OVER_SOURCE", "Origin", "Setting", "SweepPlan", "Variant", "parse_over", "plan_sweep",
           "show_value"]

OVER_SOURCE = "--over"


@dataclass(frozen=True)
class Variant:
    index: int
    """1-based, in launch order."""
    settings: tuple[Setting, ...]
    plan: RunPlan | None = None
    own_folder: tuple[str, ...] = ()
    """The ``--set parameters.output_dir=...`` that gives this variant its own folder, when the variants
    would share a fixed one (:mod:`launcher.workload.sweep_outputs`)."""

    @property
    def run_plan(self) -> RunPlan:
        """The variant's plan, once it has one (a sweep with problems launches nothing)."""
        if self.plan is None:
            raise ValueError(f"variant {self.index} has no plan: the sweep has problems to fix first")
        return self.plan

    @property
    def overrides(self) -> list[str]:
        return [s.override for s in self.settings] + list(self.own_folder)

    @property
    def label(self) -> str:
        """``sharding=no_shard procs_per_node=4``: the last part of each key, with its value."""
        return " ".join(f"{short_key(s.key)}={show_value(s.value)}" for s in self.settings) or "(as written)"

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


def parse_over(index: int, text: str) -> tuple[str, list[Any]] | Problem:
    """``parameters.fsdp.sharding=full_shard,no_shard`` -> the key and its values (YAML scalars)."""
    key, sep, raw = text.partition("=")
    if not sep or parse_path(key.strip()) is None or not raw.strip():
        return Problem(OVER_SOURCE, index, 1, "", "error", f"'{text}' is not key.path=value1,value2,...",
                       "e.g. --over parameters.fsdp.sharding=full_shard,no_shard")
    values = []
    budget = MAX_VALUES
    for part in raw.split(","):
        loaded = load_value(part, budget)
        budget -= loaded.used
        if loaded.error:
            return Problem(OVER_SOURCE, index, 1, key.strip(), "error", loaded.error, origin=text)
        values.append(loaded.value)
    return key.strip(), values


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
    loaded = _loaded(file)
    line, col = loaded.mark(("sweep",), key=True) if loaded is not None else (1, 1)
    crowd = too_many(spec, Origin(str(file), line, col, "sweep"), parsed)
    if crowd is not None:
        return SweepPlan(file, tuple(sets), spec, (), [*problems, crowd], base)
    where = origins(loaded, str(file), spec)
    expanded = expand(spec, where, parsed)
    if parsed:
        # The file's own variants were checked with the workload; the --over axes are checked here.
        def check(extra: Sequence[str]) -> list[Problem]:
            return plan_file(file, [*sets, DROP_SWEEP, *extra], home=home).problems

        problems += variant_problems(expanded, check, len(sets) + 2, base.problems)
    if any(p.is_error for p in problems):
        return SweepPlan(file, tuple(sets), spec, (), problems, base)
    data = base.result.data or {}
    # said for every variant, --over axes included (the file's check knew only its own sweep section)
    problems = [p for p in problems if not (p.path == sweep_outputs.KEY and p.severity == "warning")]
    problems += sweep_outputs.problems(data, expanded, _loaded(file), str(file))
    variants = []
    for index, (settings, own) in enumerate(zip(expanded, sweep_outputs.separate(data, expanded), strict=True),
                                            start=1):
        planned = plan_file(file, [*sets, DROP_SWEEP, *(s.override for s in settings), *own], home=home)
        problems += [p for p in planned.problems if p.is_error]
        variants.append(Variant(index, settings, planned.plan, own))
    if len(variants) == 1 and not variants[0].settings:
        problems.append(Problem(str(file), 1, 1, "sweep", "error", "nothing to sweep: no sweep.grid, "
                                "sweep.variants or --over", "e.g. --over parameters.fsdp.sharding=full_shard,no_shard"))
    unique = list({p.format(): p for p in problems}.values())
    return SweepPlan(file, tuple(sets), spec, tuple(variants), unique, base)


def _loaded(file: Path) -> LoadedYaml | None:
    try:
        return load_yaml(file.read_text(), str(file))
    except (OSError, UnicodeDecodeError):
        return None


SWEEP_NOT_RUN = ("{file} has a sweep: section: run launches the file as written, one run; "
                 "fsdp-tui sweep {file} runs every variant")
"""What ``run`` says (headless and in the app) when the file it launched has a sweep: one behaviour everywhere."""
