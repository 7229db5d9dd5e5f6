"""A workload's local dataset and chat template, looked at before anything starts.

``parameters.dataset_name`` that names a local file or folder is found where the trainer will look
(an absolute path as it is; a relative one in the code snapshot, which ships from here), its first
rows are read (no torch, no ``datasets``: :func:`trainer.wire.data_peek.peek`) and checked with the
trainer's own rules (:mod:`trainer.wire.formats`), so a missing file, a wrong column or a bad first row is
an error at the ``dataset_name`` line. Hub names and the built-in datasets are left alone; an absolute path that is not on this
machine is left alone for a run on other nodes (it may be there).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from launcher.workload.model import Workload
from launcher.workload.topology import Finding
from trainer.wire import formats
from trainer.wire.config import TrainerConfig
from trainer.wire.data_config import DataConfig, DataSource
from trainer.wire.data_files import looks_local
from trainer.wire.data_peek import peek

_AT = ("parameters", "dataset_name")
_TEMPLATE_AT = ("parameters", "data", "chat_template")
_CODE = "CODE_SOURCE_PATH"
_GENERATION = re.compile(r"\{%-?\s*(?:end)?generation\s*-?%\}")


def check_data(w: Workload, cfg: TrainerConfig, base_dir: Path | None, local_run: bool) -> list[Finding]:
    """Problems of the datasets and chat templates this workload names (each source of a mixture),
    each at its key."""
    out: list[Finding] = []
    for at, source in source_keys(cfg):
        out += _dataset(w, source.path, cfg.source_data(source), at, base_dir, local_run)
        if source.chat_template:
            out += _template(w, source.chat_template, (*at[:-1], "chat_template"), base_dir, local_run)
    return out + _template(w, cfg.data.chat_template, _TEMPLATE_AT, base_dir, local_run)


def source_keys(cfg: TrainerConfig) -> list[tuple[tuple[str | int, ...], DataSource]]:
    """Each source with the key that names it: ``dataset_name``, or ``datasets[i].path`` of a mixture."""
    if cfg.datasets is None:
        return [(_AT, cfg.sources()[0])]
    return [(("parameters", "datasets", i, "path"), s) for i, s in enumerate(cfg.datasets)]


def _dataset(w: Workload, name: str, data: DataConfig, at: tuple[str | int, ...], base_dir: Path | None,
             local_run: bool) -> list[Finding]:
    name = name.strip()
    if name.startswith("builtin:") or not looks_local(name):
        return []
    where = _where(name, w, base_dir, local_run, at)
    if isinstance(where, Finding):
        return [where]
    if where is None:
        return []
    found = peek(where)
    if found.kind == "missing":
        if not _must_exist(name, local_run):
            return []
        relative = not Path(os.path.expanduser(name)).is_absolute() and not name.startswith("$")
        return [Finding(at, "error", f"no such file or folder: {where}",
                        "a relative path is read in the code snapshot that ships from here" if relative else "")]
    return judge_peek(name, found, data, at)


def judge_peek(name: str, found, data: DataConfig, at: tuple[str | int, ...]) -> list[Finding]:
    """The trainer's rules on what was read of a source (its columns, its first rows): what it would stop at."""
    if found.problem:
        return [Finding(at, "error", f"{name}: {found.problem}")]
    if not found.columns:
        return []
    problem = formats.column_problem(found.columns, data.format, data.chat)
    if problem:
        return [Finding(at, "error", f"{name}: {problem[0]}", problem[1])]
    fmt = data.format if data.format != "auto" else formats.detect_format(found.columns, data.chat)
    for i, row in enumerate(found.rows):
        place = f"{name}:{found.lines[i]}" if found.lines else f"{name}: row {i + 1}"
        try:
            formats.read_row(fmt or "auto", row, data.chat, ValueError)
        except ValueError as err:
            return [Finding(at, "error", f"{place}: {err}")]
    return []


def _where(name: str, w: Workload, base_dir: Path | None, local_run: bool,
           at: tuple[str | int, ...] = _AT) -> Path | Finding | None:
    """The file the trainer will read, as a path on this machine; ``None`` when it cannot be known here."""
    code = (base_dir / w.code_source.snapshot.root_path).expanduser() \
        if w.code_source is not None and base_dir is not None else None
    text = name
    if text.startswith((f"${_CODE}", f"${{{_CODE}}}")):
        if code is None:
            return Finding(at, "error", f"{name}: ${_CODE} is set only with a code_source",
                           "add code_source: {type: snapshot, snapshot: {root_path: .}}")
        text = str(code) + text.split("}", 1)[1] if text.startswith("${") else str(code) + text[len(_CODE) + 1:]
    if "$" in text and not local_run:
        return None  # other variables are the node's
    path = Path(os.path.expanduser(os.path.expandvars(text)))
    if path.is_absolute():
        return path if local_run or path.exists() else None
    if code is not None:
        return code / path
    if base_dir is not None and (base_dir / path).exists():
        return Finding(at, "error", f"{name}: a relative path is read in the run's folder on the node, where "
                       "only the code snapshot is, and this workload has no code_source",
                       "add code_source: {type: snapshot, snapshot: {root_path: .}} to ship it, or give an "
                       "absolute path")
    return base_dir / path if base_dir is not None else None


def _must_exist(name: str, local_run: bool) -> bool:
    """A path on this machine (a run here) or in the code snapshot (shipped from here) must be here."""
    return local_run or not Path(os.path.expanduser(name)).is_absolute()


def _template(w: Workload, setting: str | None, at: tuple[str | int, ...], base_dir: Path | None,
              local_run: bool) -> list[Finding]:
    if not setting:
        return []
    if "{{" in setting or "{%" in setting:
        try:
            import jinja2
        except ImportError:
            return []
        try:
            # transformers' own tag, which marks what the assistant writes, parses like a plain block
            jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(_GENERATION.sub("", setting))
        except jinja2.TemplateSyntaxError as err:
            return [Finding(at, "error", f"not a valid Jinja template: {err.message} (line {err.lineno} "
                            "of the template)")]
        return []
    where = _where(setting.strip(), w, base_dir, local_run)
    if isinstance(where, Finding):
        return [Finding(at, where.severity, where.message, where.hint)]
    if where is not None and not where.is_file() and _must_exist(setting.strip(), local_run):
        return [Finding(at, "error", f"no such file: {where} (and the value is no Jinja template)",
                        "give the template's text, or a file in the code snapshot")]
    return []
