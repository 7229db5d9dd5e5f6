"""The data files a workload names where they live on the nodes (an absolute path, ``~`` or a variable:
``validate`` cannot see them from here), judged from what each node's probe read of them: there,
readable, and read by the trainer's rules (the format's columns, the first row). Pure."""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationError

from launcher.doctor.reply import DataFacts
from launcher.workload.plan import RunPlan
from trainer.wire import formats
from trainer.wire.config import TrainerConfig
from trainer.wire.data_config import DataConfig
from trainer.wire.data_files import is_url, looks_local


def node_sources(plan: RunPlan) -> list[tuple[str, str, str, DataConfig]]:
    """(key, label, path, settings) of each source whose file is on the nodes, in the workload's order."""
    if not plan.uses_builtin_trainer:
        return []
    try:
        cfg = TrainerConfig.model_validate(plan.workload.parameters or {})
    except ValidationError:
        return []  # validate says why; nothing here to look for
    out = []
    for index, source in enumerate(cfg.sources()):
        path = source.path.strip()
        if is_url(path) or path.startswith("builtin:") or not looks_local(path):
            continue
        if path.startswith(("/", "~", "$")) and not path.startswith(("$CODE_SOURCE_PATH", "${CODE_SOURCE_PATH}")):
            label = source.label() if cfg.datasets is not None else path
            out.append((cfg.source_key(index), label, path, cfg.source_data(source)))
    return out


Said = tuple[str, Literal["ok", "warning", "error"], str, str]
"""A check's name, status, what was found and what to do (the judge makes it a ``Check``)."""


def data_checks(sources: list[tuple[str, str, str, DataConfig]], found: tuple[DataFacts, ...], error: str,
                host: str) -> list[Said]:
    """One check per source: what its node found of it, judged."""
    if not sources:
        return []
    if error or len(found) != len(sources):
        return [("data", "warning", f"the data files could not be looked at on {host}: {error or 'no answer'}", "")]
    checks: list[Said] = []
    for (key, label, _, data), facts in zip(sources, found, strict=True):
        name = "data" if len(sources) == 1 else f"data {label}"
        problem, fix = _problem(facts, data, host)
        if problem:
            checks.append((name, "error", f"{key}: {problem}", fix))
            continue
        size = f", {facts.size / 1e6:.1f} MB" if facts.size is not None else ""
        shown = f" (columns {', '.join(facts.columns[:6])})" if facts.columns else ""
        checks.append((name, "ok", f"{facts.path}: readable{size}{shown}", ""))
    return checks


def _problem(facts: DataFacts, data: DataConfig, host: str) -> tuple[str, str]:
    if facts.error:
        return f"{facts.path}: could not be read: {facts.error}", ""
    if facts.kind == "missing":
        return (f"no such file or folder on {host}: {facts.path}",
                "copy it there, or point the path at storage every node mounts")
    if not facts.readable:
        return f"{facts.path}: cannot be read there (permissions)", f"let the run's user on {host} read it"
    if facts.problem:
        return f"{facts.path}: {facts.problem}", ""
    if facts.columns is None:
        return "", ""
    said = formats.column_problem(facts.columns, data.format, data.chat)
    if said:
        return f"{facts.path}: {said[0]}", said[1]
    if facts.row is None:
        return "", ""
    fmt = data.format if data.format != "auto" else formats.detect_format(facts.columns, data.chat)
    try:
        formats.read_row(fmt or "auto", dict(facts.row), data.chat, ValueError)
    except ValueError as err:
        return f"{facts.path}: first row: {err}", ""
    return "", ""
