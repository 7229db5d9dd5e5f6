"""Validate a workload file: every problem at once, each at ``file:line:col`` with its dotted key."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from launcher.workload import checks, schema_walk, sweep_check, sweep_outputs
from launcher.workload.model import Sweep, Workload
from launcher.workload.overrides import SOURCE as OVERRIDE_SOURCE
from launcher.workload.overrides import AppliedOverride, Override, apply_overrides
from launcher.workload.problems import Problem, did_you_mean, format_path, has_errors
from launcher.workload.topology import Finding
from launcher.workload.value_rules import value_problems
from launcher.workload.yaml_loader import MAX_VALUES, LoadedYaml, decode, load_yaml, too_large
from trainer.wire.config import TrainerConfig

YamlPath = tuple[str | int, ...]


@dataclass(frozen=True)
class ValidationResult:
    """Problems sorted by position; ``workload`` is set when there is no error."""

    problems: list[Problem]
    workload: Workload | None = None
    trainer_config: TrainerConfig | None = None
    data: dict[str, Any] | None = None
    overrides: list[AppliedOverride] = field(default_factory=list)
    locator: _Locator | None = field(default=None, compare=False, repr=False)

    def problem(self, path: YamlPath, severity: str, message: str, hint: str = "") -> Problem:
        """A problem found later (by a caller that knows more than the file: the run store) placed where
        ``path`` was written, in the file or the ``--set`` that wrote it."""
        if self.locator is None:
            return Problem("<workload>", 1, 1, format_path(path), severity, message, hint)  # type: ignore[arg-type]
        return self.locator.problem(path, severity, message, hint)

    @property
    def ok(self) -> bool:
        return not has_errors(self.problems)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.is_error]


def validate_file(path: Path | str, overrides: Sequence[Override] = ()) -> ValidationResult:
    """Read and validate ``path``; unreadable files are a problem, not an exception."""
    path = Path(path)
    name = str(path)
    try:
        big = too_large(name, path.stat().st_size)
        if big is not None:
            return ValidationResult([big])
        raw = path.read_bytes()
    except FileNotFoundError:
        return ValidationResult([Problem(name, 1, 1, "", "error", "no such file")])
    except IsADirectoryError:
        return ValidationResult([Problem(name, 1, 1, "", "error", "this is a folder, not a workload file")])
    except OSError as err:
        return ValidationResult([Problem(name, 1, 1, "", "error", f"cannot read: {err.strerror}")])
    text, problem = decode(raw, name)
    if problem is not None or text is None:
        return ValidationResult([problem] if problem is not None else [])
    return validate_text(text, name, overrides, base_dir=path.parent)


def validate_text(text: str, filename: str = "<workload>", overrides: Sequence[Override] = (),
                  base_dir: Path | None = None) -> ValidationResult:
    """Validate YAML text (the editor's buffer); ``base_dir`` resolves ``code_source`` paths. A
    ``sweep:`` section's variants are checked too, each problem at the sweep line that asked for it."""
    return _validate_loaded(load_yaml(text, filename), filename, overrides, base_dir, with_sweep=True)


def _validate_loaded(loaded: LoadedYaml, filename: str, overrides: Sequence[Override], base_dir: Path | None,
                     *, with_sweep: bool) -> ValidationResult:
    problems = list(loaded.problems)
    if not isinstance(loaded.data, dict):
        if not has_errors(problems):
            problems.append(Problem(filename, *loaded.mark(()), "", "error",
                                    "the file must be a mapping of keys (experiment_name: ..., compute: ...)"))
        return ValidationResult(_sorted(problems))
    data, applied, override_problems = apply_overrides(loaded.data, overrides, MAX_VALUES - loaded.used)
    if "parameters" in data and data["parameters"] is None:
        data = {**data, "parameters": {}}  # `parameters:` with nothing under it yet: being written
    problems += override_problems
    locate = _Locator(filename, loaded, {o.path: o.index for o in applied}, [str(o) for o in overrides])
    broken = [locate.problem(path, "error", message, hint) for path, message, hint in value_problems(data)]
    problems += broken

    workload: Workload | None = None
    checked: Workload | None = None
    try:
        workload = checked = Workload.model_validate(data)
    except ValidationError as err:
        problems += _convert(err, Workload, data, (), locate)
        checked = _valid_part(data, err)

    trainer_cfg: TrainerConfig | None = None
    if data.get("command") is None and "parameters" not in data:
        # The built-in trainer's keys are asked for once the user writes `parameters`, not before.
        problems.append(locate.problem((), "error", NOTHING_TO_RUN, NOTHING_TO_RUN_HINT))
    elif data.get("command") is None and isinstance(data.get("parameters"), dict):
        try:
            trainer_cfg = TrainerConfig.model_validate(data["parameters"])
        except ValidationError as err:
            problems += _convert(err, TrainerConfig, data["parameters"], ("parameters",), locate)

    if checked is not None:
        source = base_dir / Path(filename).name if base_dir is not None else None
        findings = checks.check_workload(checked, base_dir, frozenset(data), source)
        if trainer_cfg is not None:
            findings += checks.check_trainer(checked, trainer_cfg, base_dir)
        problems += [locate.finding(f) for f in findings]
    if "compute" not in data and not has_errors(problems):
        problems.append(locate.problem(("compute",), "warning",
                                       "no compute section: this runs one process on this machine",
                                       "add compute: with hosts: [...] and procs_per_node: N for SSH nodes "
                                       "or more processes", at=()))
    if broken:  # a value that breaks the rules is said once, in their words, not again by the schema
        said = {(p.file, p.line, p.path) for p in broken}
        problems = [p for p in problems if p in broken or (p.file, p.line, p.path) not in said]
    if with_sweep:
        problems += _sweep_problems(loaded, filename, overrides, base_dir, data, problems)
    ok = not has_errors(problems)
    return ValidationResult(
        _sorted(problems),
        workload if ok else None,
        trainer_cfg if ok else None,
        data,
        applied,
        locate,
    )


def _sweep_problems(loaded: LoadedYaml, filename: str, overrides: Sequence[Override], base_dir: Path | None,
                    data: dict[str, Any], known: list[Problem]) -> list[Problem]:
    """Each variant of a shape-valid ``sweep:`` section validated as ``fsdp-tui sweep`` will launch it."""
    raw = data.get("sweep")
    if not isinstance(raw, dict):
        return []
    try:
        spec = Sweep.model_validate(raw)
    except ValidationError:
        return []  # the section's own shape problems are reported with the workload's
    line, col = loaded.mark(("sweep",), key=True)
    crowd = sweep_check.too_many(spec, sweep_check.Origin(filename, line, col, "sweep"))
    if crowd is not None:
        return [crowd]
    where = sweep_check.origins(loaded, filename, spec)
    out = sweep_check.shape_problems(spec, where)
    if not spec.grid and not spec.variants:
        line, col = loaded.mark(("sweep",), key=True)
        out.append(Problem(filename, line, col, "sweep", "warning", "the sweep has no grid and no variants",
                           "add sweep.grid or sweep.variants, or give axes with fsdp-tui sweep --over"))
    variants = [v for v in sweep_check.expand(spec, where) if v]
    if not variants:
        return out
    out += sweep_outputs.problems(data, variants, loaded, filename)

    def check(sets: Sequence[str]) -> list[Problem]:
        extra = [*overrides, sweep_check.DROP_SWEEP, *sets]
        return _validate_loaded(loaded, filename, extra, base_dir, with_sweep=False).problems

    return out + sweep_check.variant_problems(variants, check, len(overrides) + 2, known)


def _valid_part(data: dict[str, Any], err: ValidationError) -> Workload | None:
    """The workload without its invalid top-level keys, so cross-field rules still run on the rest."""
    bad = {e["loc"][0] for e in err.errors() if e["loc"]}
    pruned = {k: v for k, v in data.items() if k not in bad}
    if "experiment_name" in bad:
        pruned["experiment_name"] = "unnamed"
    try:
        return Workload.model_validate(pruned)
    except ValidationError:
        return None


def _sorted(problems: list[Problem]) -> list[Problem]:
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (p.file == OVERRIDE_SOURCE, p.file, p.line, p.column, p.path))


class _Locator:
    """Turns a dotted path into a position: the YAML mark, or the ``--set`` that wrote it."""

    def __init__(self, filename: str, loaded: LoadedYaml, override_index: dict[YamlPath, int],
                 override_texts: list[str]) -> None:
        self.filename = filename
        self.loaded = loaded
        self.override_index = override_index
        self.override_texts = override_texts

    def at(self, path: YamlPath, *, key: bool = False) -> tuple[str, int, int]:
        for cut in range(len(path), 0, -1):
            if path[:cut] in self.override_index:
                return OVERRIDE_SOURCE, self.override_index[path[:cut]], 1
        return (self.filename, *self.loaded.mark(path, key=key))

    def written(self, path: YamlPath, value: Any) -> str:
        """``value`` as the user typed it: the file's text for a scalar YAML read as something else
        (``off`` is read as ``False``), the ``--set`` value's own text, else the value itself."""
        for cut in range(len(path), 0, -1):
            if path[:cut] in self.override_index:
                text = self.override_texts[self.override_index[path[:cut]] - 1]
                _, _, typed = text.partition("=")
                return typed if cut == len(path) and typed else str(value)
        return self.loaded.written.get(path, str(value))

    def problem(self, path: YamlPath, severity: str, message: str, hint: str = "", *, key: bool = False,
                at: YamlPath | None = None) -> Problem:
        where = self.at(path if at is None else at, key=key)
        origin = self.override_texts[where[1] - 1] if where[0] == OVERRIDE_SOURCE else ""
        return Problem(*where, format_path(path), severity, message, hint, origin)  # type: ignore[arg-type]

    def finding(self, f: Finding) -> Problem:
        return self.problem(f.path, f.severity, f.message, f.hint, key=f.path[-1:] == ("compute",))


NOTHING_TO_RUN = "nothing to run: add a `command:` to run your own script, or `parameters:` for the built-in trainer"
NOTHING_TO_RUN_HINT = (
    "your script: 'command: torchrun train.py' (the templates show the multi-node flags); "
    "the built-in trainer: 'parameters: {model_name: <hub id>, dataset_name: <dataset>, output_dir: outputs}'"
)

_TYPE_WORDS = {
    "dict_type": "expected a mapping (key: value lines)",
    "model_type": "expected a mapping (key: value lines)",
    "model_attributes_type": "expected a mapping (key: value lines)",
    "tuple_type": "expected a list (lines starting with '- ')",
    "list_type": "expected a list (lines starting with '- ')",
    "string_type": "expected text",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
}


def _mapping_at(data: Any, path: YamlPath) -> dict:
    for part in path:
        data = data.get(part) if isinstance(data, dict) else data[part] if isinstance(data, list) and isinstance(
            part, int) and part < len(data) else None
    return data if isinstance(data, dict) else {}


def _unknown_hint(name: str, allowed: tuple[str, ...], siblings: dict) -> str:
    """"did you mean 'max_steps'?" for a misspelt key, unless 'max_steps' is written beside it: then
    renaming would make a duplicate key, and the user decides which of the two to keep."""
    hint = did_you_mean(name, allowed)
    meant = re.fullmatch(r"did you mean '([^']+)'\?", hint)
    if meant and meant.group(1) in siblings:
        return f"'{meant.group(1)}' is set beside it: remove the one you do not want"
    return hint or _allowed(allowed)


def _convert(err: ValidationError, model: type[BaseModel], data: Any, prefix: YamlPath,
             locate: _Locator) -> list[Problem]:
    out: list[Problem] = []
    seen: set[YamlPath] = set()
    for e in err.errors():
        path = prefix + _clean_loc(e["loc"], data)
        kind = e["type"]
        if kind != "extra_forbidden" and path in seen:
            continue  # one message per key; unions report once per member
        seen.add(path)
        full = locate.loaded.data
        if kind == "extra_forbidden":
            allowed = schema_walk.keys_at(path[:-1], full)
            name = str(path[-1])
            out.append(locate.problem(path, "error", f"unknown key '{name}'",
                                      _unknown_hint(name, allowed, _mapping_at(full, path[:-1])), key=True))
        elif kind == "missing":
            out.append(locate.problem(path, "error", f"missing required key '{path[-1]}'",
                                      _missing_hint(str(path[-1])), key=True, at=path[:-1]))
        elif kind == "literal_error":
            choices = tuple(re.findall(r"'([^']*)'", e.get("ctx", {}).get("expected", "")))
            got = locate.written(path, e.get("input"))
            only = f"use '{choices[0]}'" if len(choices) == 1 else ""
            out.append(locate.problem(path, "error", f"'{got}' is not one of {', '.join(choices)}",
                                      did_you_mean(got, choices) or only))
        elif kind == "string_pattern_mismatch" and path == ("experiment_name",):
            out.append(locate.problem(path, "error",
                                      f"'{e.get('input')}' is not a valid experiment name",
                                      "1-100 letters, digits, '_' or '-'"))
        else:
            message = _TYPE_WORDS.get(kind) or _plain(e["msg"])
            got = e.get("input")
            # A webhook URL or password is a credential: never echoed, even when it is the wrong shape.
            if not isinstance(got, (dict, list)) and "got" not in message and path[:1] != ("notify",):
                message += f", got {got!r}"
            out.append(locate.problem(path, "error", message))
    # Without its other required keys the section's own rule (one source: dataset_name or datasets) never
    # runs: the data is asked for with them, so that every problem shows at once.
    if (any(e["type"] == "missing" for e in err.errors()) and isinstance(data, dict)
            and {"dataset_name", "datasets"} <= set(model.model_fields)
            and data.get("dataset_name") is None and data.get("datasets") is None
            and prefix + ("dataset_name",) not in seen):
        out.append(locate.problem(prefix + ("dataset_name",), "error", "missing required key 'dataset_name'",
                                  _missing_hint("dataset_name"), key=True, at=prefix))
    return out


def _plain(message: str) -> str:
    """Pydantic's message in the words the rest of the problems use."""
    message = re.sub(r"^(Value error|Assertion failed), ", "", message)
    message = re.sub(r"a valid dictionary or instance of \w+", "a mapping (key: value lines)", message)
    message = message.replace("Input should be", "must be").replace("Input should have", "must have")
    message = message.replace("String should have", "must have").replace("List should have", "must have")
    return message[:1].lower() + message[1:]


def _clean_loc(loc: tuple[Any, ...], data: Any) -> YamlPath:
    """Drop pydantic's union-member tags (``str``, ``int``...) that are not keys of the data."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, list) and isinstance(part, int) and part < len(node) or isinstance(node, dict) and part in node:
            out.append(part)
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and part not in _UNION_TAGS \
                and not re.search(r"[\[\]-]", part):
            out.append(part)  # a missing key
            node = None
    return tuple(out)


_UNION_TAGS = {"str", "int", "float", "bool", "list", "dict", "tuple", "none"}


def _allowed(keys: tuple[str, ...]) -> str:
    return f"allowed here: {', '.join(keys)}" if keys and len(keys) <= 12 else ""


def _missing_hint(key: str) -> str:
    return {
        "experiment_name": "add 'experiment_name: my-run' at the top",
        "model_name": "add parameters.model_name: a hub id or a local model folder",
        "dataset_name": "add parameters.dataset_name: a hub dataset or a local json/jsonl/parquet file",
        "output_dir": "add parameters.output_dir: where checkpoints go on the nodes",
    }.get(key, "")
