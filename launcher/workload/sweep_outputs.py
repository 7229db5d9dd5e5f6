"""Sweep variants never share checkpoints unless the user asks for it.

The built-in trainer resumes from the newest checkpoint in ``output_dir`` (``checkpoint.resume: auto``).
Variants that share a fixed ``output_dir`` would resume each other: the second finds the first's final
checkpoint and trains nothing, and the sweep compares nothing. A folder that is already per run (a
relative path: inside each run's own folder; one with ``$FSDP_TUI_RUN_ID``) is left as it is; a fixed
one is made per variant (``<output_dir>/$FSDP_TUI_RUN_ID``) with a warning, unless the sweep says
``share_output_dir: true``. A user script (``command``) is only warned: it reads ``output_dir`` as it
likes, and may not expand variables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from launcher.workload.overrides import apply_overrides
from launcher.workload.problems import Problem
from launcher.workload.sweep_check import DROP_SWEEP, Setting, show_value, variant_list
from launcher.workload.yaml_loader import LoadedYaml
from trainer.wire.ckpt_owner import RUN_ID_VAR, private_folder

KEY = "parameters.output_dir"


def is_per_run(output_dir: str) -> bool:
    """Whether every run gets a folder of its own from this ``output_dir`` as written: the checkpoint
    rules' own answer (:func:`trainer.wire.ckpt_owner.private_folder`), asked here."""
    return private_folder(output_dir.strip())


def own_folder(output_dir: str) -> str:
    """The per-variant folder a shared ``output_dir`` becomes."""
    return f"{output_dir.rstrip('/')}/${RUN_ID_VAR}"


@dataclass(frozen=True)
class Shared:
    """A fixed ``output_dir`` that several variants would write to."""

    output_dir: str
    variants: tuple[int, ...]
    """1-based indices of the variants that share it."""


def output_dirs(data: dict[str, Any], variants: Sequence[tuple[Setting, ...]]) -> list[str | None]:
    """Each variant's ``parameters.output_dir`` (``data``: the workload with its ``--set`` overrides)."""
    out: list[str | None] = []
    for settings in variants:
        varied, _, _ = apply_overrides(data, [DROP_SWEEP, *(s.override for s in settings)])
        params = varied.get("parameters")
        value = params.get("output_dir") if isinstance(params, dict) else None
        out.append(value if isinstance(value, str) else None)
    return out


def shared(dirs: Sequence[str | None]) -> list[Shared]:
    """The fixed folders that two or more variants would share."""
    by_dir: dict[str, list[int]] = {}
    for index, value in enumerate(dirs, start=1):
        if value is not None and not is_per_run(value):
            by_dir.setdefault(value.strip(), []).append(index)
    return [Shared(d, tuple(v)) for d, v in by_dir.items() if len(v) > 1]


def separate(data: dict[str, Any], variants: Sequence[tuple[Setting, ...]]) -> list[tuple[str, ...]]:
    """The extra ``--set`` each variant gets so that it has its own folder (empty where it has one, where
    the sweep shares on purpose, or for a user script)."""
    extra: list[tuple[str, ...]] = [() for _ in variants]
    if _opted_in(data) or data.get("command") is not None:
        return extra
    dirs = output_dirs(data, variants)
    for group in shared(dirs):
        for index in group.variants:
            extra[index - 1] = (f"{KEY}={show_value(own_folder(group.output_dir))}",)
    return extra


def problems(data: dict[str, Any], variants: Sequence[tuple[Setting, ...]], loaded: LoadedYaml | None,
             filename: str) -> list[Problem]:
    """A warning for each fixed ``output_dir`` the variants share, at its line."""
    if _opted_in(data):
        return []
    script = data.get("command") is not None
    out = []
    for group in shared(output_dirs(data, variants)):
        line, col = _mark(loaded, data)
        which = f"variants {variant_list(list(group.variants))}"
        if script:
            out.append(Problem(filename, line, col, KEY, "warning",
                               f"{which} give your script the same output_dir '{group.output_dir}': they write "
                               "into one folder", f"put ${RUN_ID_VAR} in it (your script expands it), vary it in "
                               "the sweep, or set sweep.share_output_dir: true"))
        else:
            out.append(Problem(filename, line, col, KEY, "warning",
                               f"{which} would share output_dir '{group.output_dir}' and resume each other's "
                               f"checkpoints: each writes to {own_folder(group.output_dir)} instead",
                               "set sweep.share_output_dir: true to share it on purpose"))
    return out


def _opted_in(data: dict[str, Any]) -> bool:
    sweep = data.get("sweep")
    return isinstance(sweep, dict) and sweep.get("share_output_dir") is True


def _mark(loaded: LoadedYaml | None, data: dict[str, Any]) -> tuple[int, int]:
    if loaded is None:
        return 1, 1
    params = loaded.data.get("parameters") if isinstance(loaded.data, dict) else None
    if isinstance(params, dict) and "output_dir" in params:
        return loaded.mark(("parameters", "output_dir"))
    return loaded.mark(("sweep",), key=True)
