"""Read YAML and remember where every key and value came from.

PyYAML's ``safe_load`` forgets positions and silently keeps the last of two duplicate keys. We compose
the node graph instead and build plain Python values ourselves, which gives us per-path line/column
marks, duplicate-key errors naming both lines, and a node budget that stops alias bombs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from launcher.workload.problems import Problem, format_path

MAX_BYTES = 1_000_000
"""Workload files larger than this are refused (a workload is a few KiB); ``FSDP_TUI_MAX_WORKLOAD_KB``
raises the limit."""
LIMIT_ENV = "FSDP_TUI_MAX_WORKLOAD_KB"


def max_bytes() -> int:
    """The size limit: ``$FSDP_TUI_MAX_WORKLOAD_KB`` kB when set to a whole number, else ``MAX_BYTES``."""
    raw = os.environ.get(LIMIT_ENV, "")
    return int(raw) * 1000 if raw.isdigit() and int(raw) > 0 else MAX_BYTES


def too_large(filename: str, size: int) -> Problem | None:
    """The problem of a file of ``size`` bytes over the limit, saying the limit and how to raise it."""
    limit = max_bytes()
    if size <= limit:
        return None
    return Problem(filename, 1, 1, "", "error",
                   f"the file is {size / 1e6:.1f} MB; workload files are limited to {limit // 1000:,} kB",
                   f"keep data in separate files, or raise the limit with {LIMIT_ENV}=<kB>")
MAX_VALUES = 200_000
"""Values built from one workload, aliases counted each time they are used (alias bombs): the file and
every ``--set`` or ``--over`` value on top of it share this one budget."""
MAX_INT_DIGITS = 40
"""A whole number longer than this is out of any range a workload has (Python itself refuses to read one
of over 4300 digits): refused where it is written, before it is built."""

Path = tuple[str | int, ...]
Mark = tuple[int, int]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "timestamp", "map", "seq", "binary", "merge")
)


@dataclass
class LoadedYaml:
    """The document as plain Python data, with 1-based (line, column) of each value and key."""

    data: Any = None
    used: int = 0
    """Values built, aliases counted each time: what is left of :data:`MAX_VALUES` goes to overrides."""
    value_marks: dict[Path, Mark] = field(default_factory=dict)
    key_marks: dict[Path, Mark] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    written: dict[Path, str] = field(default_factory=dict)
    """The text of each plain scalar YAML read as something else than text (``off`` -> ``False``, ``1e3``
    -> ``1000.0``, ``~`` -> ``None``): a message about the value quotes what the user typed."""

    def mark(self, path: Path, *, key: bool = False) -> Mark:
        """Best position for ``path``: the key or value itself, else its nearest located parent."""
        marks = (self.key_marks, self.value_marks) if key else (self.value_marks, self.key_marks)
        for cut in range(len(path), -1, -1):
            for table in marks:
                if path[:cut] in table:
                    return table[path[:cut]]
        return (1, 1)


class _TooBig(Exception):
    pass


def decode(raw: bytes, filename: str) -> tuple[str | None, Problem | None]:
    """UTF-8 text (a BOM is allowed), or a problem at the first undecodable byte."""
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as err:
        before = raw[: err.start]
        line = before.count(b"\n") + 1
        column = err.start - (before.rfind(b"\n") + 1) + 1
        return None, Problem(
            filename, line, column, "", "error",
            f"the file is not valid UTF-8 (byte 0x{raw[err.start]:02x})",
            "save it as UTF-8",
        )


def load_yaml(text: str, filename: str) -> LoadedYaml:
    """Parse one YAML document; every failure becomes a :class:`Problem`, never an exception."""
    out = LoadedYaml()
    big = too_large(filename, len(text.encode("utf-8", "surrogatepass")))
    if big is not None:
        out.problems.append(big)
        return out
    if not text.strip() or all(line.lstrip().startswith("#") or not line.strip() for line in text.splitlines()):
        out.problems.append(Problem(filename, 1, 1, "", "error", "the file is empty",
                                    "start with 'experiment_name: my-run'"))
        return out
    try:
        node = _compose(text)
    except yaml.MarkedYAMLError as err:
        out.problems.append(_syntax_problem(err, filename))
        return out
    except yaml.reader.ReaderError as err:
        out.problems.append(_reader_problem(err, text, filename))
        return out
    except yaml.YAMLError as err:
        out.problems.append(Problem(filename, 1, 1, "", "error", f"YAML error: {err}"))
        return out
    except RecursionError:
        out.problems.append(Problem(filename, 1, 1, "", "error", "the document is nested too deeply"))
        return out
    if node is None:
        out.problems.append(Problem(filename, 1, 1, "", "error", "the file is empty",
                                    "start with 'experiment_name: my-run'"))
        return out
    builder = _Builder(filename, out)
    try:
        out.data = builder.build(node, ())
    except _TooBig:
        out.data = None
        out.problems.append(Problem(filename, 1, 1, "", "error",
                                    "the document expands to too many values (alias bomb?)",
                                    "use fewer anchors and aliases"))
    except RecursionError:
        out.data = None
        out.problems.append(Problem(filename, 1, 1, "", "error", "the document is nested too deeply"))
    out.used = MAX_VALUES - builder.budget
    return out


@dataclass(frozen=True)
class LoadedValue:
    """One value given on the command line (``--set k=VALUE``, ``--over k=V1,V2``), read as YAML under the
    file's rules and from what is left of its budget."""

    value: Any
    error: str = ""
    """Why the value is refused (empty when it is not): too big, an alias bomb, a tag, a duplicate key."""
    used: int = 0


def load_value(text: str, budget: int = MAX_VALUES) -> LoadedValue:
    """``text`` as a YAML value; text that is not YAML at all stays the text itself (``a: b: c``).

    The same builder as a file's: aliases are expanded as they are used and counted, so an alias bomb stops
    at the budget instead of being written out later (a launch saves the workload it runs)."""
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes():
        return LoadedValue(None, f"the value is longer than {max_bytes() // 1000:,} kB, the limit of a "
                                 f"workload (raise it with {LIMIT_ENV}=<kB>)")
    if not text.strip():
        return LoadedValue("")
    try:
        node = _compose(text)
    except yaml.YAMLError:
        return LoadedValue(text)
    except RecursionError:
        return LoadedValue(None, "the value is nested too deeply")
    if node is None:
        return LoadedValue("")
    loaded = LoadedYaml()
    builder = _Builder("<value>", loaded)
    builder.budget = budget
    try:
        value = builder.build(node, ())
    except _TooBig:
        return LoadedValue(None, "the value expands to too many values (alias bomb?); use fewer anchors "
                                 "and aliases", budget)
    except RecursionError:
        return LoadedValue(None, "the value is nested too deeply")
    used = budget - builder.budget
    if loaded.problems:
        first = loaded.problems[0]
        return LoadedValue(None, f"{first.message}" + (f" ({first.hint})" if first.hint else ""), used)
    return LoadedValue(value, "", used)


def _reader_problem(err: yaml.reader.ReaderError, text: str, filename: str) -> Problem:
    """A character YAML does not allow (a NUL byte, a control character), at its own line and column."""
    before = text[: err.position]
    line = before.count("\n") + 1
    column = err.position - (before.rfind("\n") + 1) + 1
    char = err.character if isinstance(err.character, int) else 0
    return Problem(filename, line, column, "", "error",
                   f"a character YAML does not allow (U+{char:04X}: {err.reason})",
                   "remove it; in a double-quoted string a control character can be written as an escape")


_INDENT_WORDS = ("expected <block end>", "did not find expected key", "did not find expected '-'")
"""PyYAML's words for a line indented more or less than its neighbours."""


def _compose(text: str) -> yaml.Node | None:
    """The node graph, by libyaml when PyYAML has it (17x faster on a 300-line file: the editor
    validates on every pause in typing). A file libyaml refuses is parsed again by the Python parser,
    whose error messages and marks the problems are written against."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return yaml.compose(text, Loader=fast)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def _syntax_problem(err: yaml.MarkedYAMLError, filename: str) -> Problem:
    mark = err.problem_mark or err.context_mark
    # An unclosed quote or bracket is reported at the end of the file; where it opened is what helps.
    if err.context_mark is not None and (
        "quoted scalar" in (err.context or "") or "flow" in (err.context or "")
    ):
        mark = err.context_mark
    message = " ".join(part for part in (err.context, err.problem) if part) or "invalid YAML"
    hint = ""
    if "'\\t'" in message or "\t" in (err.problem or ""):
        message = "a tab character where YAML expects spaces"
        hint = "indent with spaces, not tabs"
    elif "quoted scalar" in message:
        hint = "close the quote"
    elif "mapping values are not allowed" in message:
        hint = "put a space after ':' in 'key: value', or quote the value; or check the indentation"
    elif "could not find expected ':'" in message:
        hint = "a key needs ':' after it ('key: value'); a line that continues a value is indented under it"
    elif any(words in message for words in _INDENT_WORDS):
        hint = ("check the indentation: keys of one mapping start in the same column, "
                "and a key's children are indented under it")
    line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    return Problem(filename, line, column, "", "error", f"YAML syntax: {message}", hint)


class _Builder:
    """Turns a composed node graph into dicts/lists/scalars, recording marks and duplicate keys."""

    def __init__(self, filename: str, out: LoadedYaml) -> None:
        self.filename = filename
        self.out = out
        self.budget = MAX_VALUES
        self.constructor = yaml.SafeLoader("")

    def build(self, node: yaml.Node, path: Path) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise _TooBig
        self.out.value_marks.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        if node.tag not in _PLAIN_TAGS:
            self._problem(node, path, f"unsupported value: the tag '{node.tag}' is not plain YAML",
                          "use plain YAML scalars, lists and mappings")
            if isinstance(node, yaml.ScalarNode):
                return node.value
            node = (yaml.SequenceNode("tag:yaml.org,2002:seq", node.value, node.start_mark, node.end_mark)
                    if isinstance(node, yaml.SequenceNode)
                    else yaml.MappingNode("tag:yaml.org,2002:map", node.value, node.start_mark, node.end_mark))
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        if node.tag.endswith(":int") and len(node.value.lstrip("+-").replace("_", "")) > MAX_INT_DIGITS:
            self._problem(node, path, f"the number has {len(node.value)} digits: out of range for any key",
                          "write a smaller number")
            return None
        try:
            value = self.constructor.construct_object(node, deep=True)
        except ValueError as err:  # a number Python will not read (e.g. a float's digits past its limit)
            self._problem(node, path, f"unsupported value: {err}", "use plain YAML scalars, lists and mappings")
            return None
        except yaml.YAMLError as err:
            line, column = node.start_mark.line + 1, node.start_mark.column + 1
            self.out.problems.append(Problem(self.filename, line, column, format_path(path), "error",
                                             f"unsupported value: {getattr(err, 'problem', err)}",
                                             "use plain YAML scalars, lists and mappings"))
            return None
        if not isinstance(value, str) and isinstance(node, yaml.ScalarNode):
            self.out.written[path] = node.value
        return value

    def _mapping(self, node: yaml.MappingNode, path: Path) -> dict[str, Any]:
        result: dict[str, Any] = {}
        seen: dict[str, int] = {}
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.append(value_node)
                continue
            key = self._key(key_node, path)
            if key is None:
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                self.out.problems.append(Problem(
                    self.filename, line, key_node.start_mark.column + 1, format_path((*path, key)), "error",
                    f"duplicate key '{key}' (first defined at line {seen[key]})",
                    "remove one of them; YAML would silently keep only the last",
                ))
                continue
            seen[key] = line
            self.out.key_marks.setdefault((*path, key), (line, key_node.start_mark.column + 1))
            result[key] = self.build(value_node, (*path, key))
        for merge in merges:
            sources = merge.value if isinstance(merge, yaml.SequenceNode) else [merge]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    self._problem(source, path, "'<<' merges only mappings")
                    continue
                merged = self._mapping(source, path)
                for key, value in merged.items():
                    result.setdefault(key, value)
        return result

    def _key(self, key_node: yaml.Node, path: Path) -> str | None:
        if isinstance(key_node, yaml.ScalarNode):
            # The key's own text: 'on' stays "on" and '1' stays "1" instead of becoming True/1.
            return str(key_node.value)
        self._problem(key_node, path, "a key must be a plain name, not a list or mapping")
        return None

    def _problem(self, node: yaml.Node, path: Path, message: str, hint: str = "") -> None:
        self.out.problems.append(Problem(self.filename, node.start_mark.line + 1, node.start_mark.column + 1,
                                         format_path(path), "error", message, hint))
