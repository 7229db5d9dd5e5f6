"""The door hands out types and errors, never presentation: what turns its values into text for a person lives
in ``launcher.present``, which the front ends import directly. A room of the door that re-exported one of its
functions (or classes) would put presentation back on the door: these tests fail then."""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOOR = ROOT / "launcher" / "api"
PRESENT = ROOT / "launcher" / "present"

COMPUTATIONS = {
    "launcher.api.launching": {"launch"},
    "launcher.api.nettests": {"judge_pairs", "rows", "to_json"},
    "launcher.api.run_files": {"tail_offset"},
    "launcher.api.runs": {"classify_line", "might_signal", "node_rows"},
}
"""The plain functions the door hands out, each one the core computes with or writes a record with: a launch;
a test's verdict and rows, which ``--json`` writes too; a log's tail offset; a log line's triage;
a run's node rows (``show --nodes`` rebuilds them from the record). A function that only turns values into
text for a person is none of these: it goes in ``launcher.present``."""

NOT_PROSE = {
    "launcher.api.launching.AlreadyLaunched.token": "the idempotency token the earlier launch claimed",
    "launcher.api.nettests.Judged.cut_lines": "the core's words for the budget's cuts: --json writes them (cuts[].text)",
    "launcher.api.nettests.Judged.verdict_lines": "the core's words for the verdict: --json and show write them",
    "launcher.api.nodes.GpuHolders.leftovers": "run ids",
    "launcher.api.nodes.Nodes.shell_argv": "an argv",
    "launcher.api.records.Records.secret_env_name": "an environment variable's name",
    "launcher.api.records.Records.store_problem": "the store's damage as the core reports it (an error's words)",
    "launcher.api.run_reading.RunReading.workload_text": "a recorded file's text",
    "launcher.api.runs.Runs.adopt": "run ids",
    "launcher.api.runs.Runs.find": "a run id",
    "launcher.api.sweeps.Sweeps.adopt": "sweep ids",
    "launcher.api.sweeps.Sweeps.find": "a sweep id",
    "launcher.api.sweeps.Sweeps.start": "a sweep id",
}
"""The door's functions and methods that answer ``str`` (or strings) that are not text made for a person:
ids, names, an argv, a file's text, an error's words, and the core's own words that ``--json`` writes."""

PROSE_CONTAINERS = {"list", "tuple", "Sequence", "Iterable", "Iterator", "Collection", "AsyncIterator"}


def answers_text(annotation: str | None) -> bool:
    """Whether a return annotation (as written: the door's modules defer them) is ``str``, an optional one,
    or a container of ``str`` (``list[str]``, ``tuple[str, ...]``, ``Iterable[str]``)."""
    if annotation is None:
        return False
    node = ast.parse(annotation, mode="eval").body
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # str | None
        node = node.left if not _is_none(node.left) else node.right
    if isinstance(node, ast.Name):
        return node.id == "str"
    if isinstance(node, ast.Subscript) and _name(node.value) in PROSE_CONTAINERS:
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return all(isinstance(a, ast.Name) and a.id == "str" or isinstance(a, ast.Constant) and a.value is ...
                   for a in args)
    return False


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def door_callables(room: str) -> dict[str, object]:
    """Every function the room hands out and every public method and property of the classes the door defines
    itself (those it inherits from the door too), by dotted name where it is defined."""
    out: dict[str, object] = {}
    for name, value in handed_out(room).items():
        if isinstance(value, types.FunctionType):
            out[f"{room}.{name}"] = value
        elif isinstance(value, type) and value.__module__.startswith("launcher.api"):
            for cls in value.__mro__:
                if not cls.__module__.startswith("launcher.api"):
                    continue
                for attr, member in vars(cls).items():
                    if attr.startswith("_"):
                        continue
                    function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                    if isinstance(function, types.FunctionType):
                        out[f"{cls.__module__}.{cls.__qualname__}.{attr}"] = function
    return out


def text_answers(callables: dict[str, object]) -> set[str]:
    """Those of ``callables`` whose return annotation says they answer text."""
    return {name for name, f in callables.items() if answers_text(getattr(f, "__annotations__", {}).get("return"))}


def rooms() -> list[str]:
    """Every module of the door that hands names out (has an ``__all__``)."""
    names = [f"launcher.api.{p.stem}" if p.stem != "__init__" else "launcher.api" for p in sorted(DOOR.glob("*.py"))]
    return [n for n in names if hasattr(importlib.import_module(n), "__all__")]


def handed_out(room: str) -> dict[str, object]:
    """Each name of the room's ``__all__`` and what it resolves to (loading it, as a front end's import does)."""
    module = importlib.import_module(room)
    return {name: getattr(module, name) for name in module.__all__}


def own_names(path: Path) -> set[str]:
    """The public names a module defines itself at its top level (functions, classes, assignments), not those
    it imports."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return {n for n in out if not n.startswith("_")}


def presentation() -> dict[int, str]:
    """Every object ``launcher.present`` defines, by identity: ``{id(obj): "launcher.present.x.name"}``."""
    out = {}
    for path in sorted(PRESENT.glob("*.py")):
        name = "launcher.present" if path.stem == "__init__" else f"launcher.present.{path.stem}"
        module = importlib.import_module(name)
        for attr in own_names(path):
            out[id(getattr(module, attr))] = f"{name}.{attr}"
    return out


def presentation_on(room: str, names: dict[str, object], presented: dict[int, str]) -> list[str]:
    """The names of ``room`` that are presentation: an object of ``launcher.present`` itself, or a function or
    class defined in one of its modules."""
    out = []
    for name, value in names.items():
        home = presented.get(id(value)) or (
            f"{value.__module__}.{value.__qualname__}"
            if isinstance(value, (types.FunctionType, type)) and value.__module__.startswith("launcher.present")
            else None)
        if home is not None:
            out.append(f"{room}.{name} is {home}: presentation (import it from launcher.present)")
    return out


def test_the_door_hands_out_nothing_of_the_presentation_room():
    presented = presentation()
    assert len(presented) >= 10  # the walk sees the room's functions and classes
    assert [m for room in rooms() for m in presentation_on(room, handed_out(room), presented)] == []


def test_every_function_the_door_hands_out_is_a_computation_of_the_core():
    found = {room: {name for name, value in handed_out(room).items() if isinstance(value, types.FunctionType)}
             for room in rooms()}
    living_in_present = [f"{room}.{name}" for room, names in found.items() for name in names
                         if getattr(importlib.import_module(room), name).__module__.startswith("launcher.present")]
    assert living_in_present == []
    assert {room: names for room, names in found.items() if names} == COMPUTATIONS


def test_no_room_of_the_door_names_the_presentation_room():
    """Not in a lazy table, not in an import: the door never loads presentation (the layers contract refuses an
    import; a lazy table's strings are read here). Its docs may point to it."""
    said = [f"{p.relative_to(ROOT)}:{line}: {text!r}" for p in sorted(DOOR.glob("*.py"))
            for line, text in code_strings(p.read_text()) if "launcher.present" in text]
    assert said == []


def code_strings(source: str) -> list[tuple[int, str]]:
    """Every string constant of ``source`` that is not a docstring (a bare string statement), with its line."""
    tree = ast.parse(source)
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


@pytest.mark.parametrize(("source", "said"), [
    ('__getattr__ = lazy_names(__name__, {"launcher.present.nettest": ("headline",)})', [(1, "launcher.present.nettest")]),
    ('"""Presentation is in launcher.present."""\nX = 1', []),
    ('from launcher.present.samples import side_lines', []),
])
def test_a_lazy_table_that_names_the_presentation_room_is_read(source, said):
    assert [(line, text) for line, text in code_strings(source) if "launcher.present" in text] == said


@pytest.mark.parametrize("module, name", [
    ("launcher.present.nettest", "headline"),
    ("launcher.present.comparison", "Column"),
    ("launcher.present.comparison", "COLUMNS"),
    ("launcher.present.stop_output", "StopOutput"),
])
def test_a_room_that_hands_out_presentation_is_caught(monkeypatch, module, name):
    import launcher.api.runs as room

    value = getattr(importlib.import_module(module), name)
    monkeypatch.setattr(room, "__all__", [*room.__all__, name])
    monkeypatch.setattr(room, name, value, raising=False)
    assert presentation_on("launcher.api.runs", {name: value}, presentation()) == [
        f"launcher.api.runs.{name} is {module}.{name}: presentation (import it from launcher.present)"]
    assert presentation_on("launcher.api.runs", handed_out("launcher.api.runs"), presentation()) != []


def test_no_function_of_the_door_answers_text_for_a_person():
    """A door function (or a method of a door type) that answers ``str``, ``list[str]``, ``Iterable[str]`` made
    from values is presentation: it returns the typed value, and ``launcher.present`` words it."""
    found = set().union(*(text_answers(door_callables(room)) for room in rooms()))
    assert found - set(NOT_PROSE) == set()


@pytest.mark.parametrize(("annotation", "text"), [
    ("str", True), ("str | None", True), ("list[str]", True), ("tuple[str, ...]", True), ("Iterable[str]", True),
    ("collections.abc.Sequence[str]", True), ("None | str", True),
    ("Path", False), ("dict[str, float]", False), ("list[tuple[str, int | None]]", False), ("Estimate | None", False),
    ("list[RunKind]", False), (None, False),
])
def test_a_return_annotation_that_answers_text_is_read(annotation, text):
    assert answers_text(annotation) is text


def test_a_door_method_that_words_a_value_is_caught(monkeypatch):
    """Put back what the door said of an estimate (``Runs.estimate_lines``, now
    ``launcher.present.plan_preview.estimate_lines``): the walk finds it."""
    import launcher.api.runs as room

    def estimate_lines(self, plan, file: str = "FILE") -> list[str]:
        return []

    estimate_lines.__annotations__["return"] = "list[str]"  # as the deferred annotation reads
    monkeypatch.setattr(room.Runs, "estimate_lines", estimate_lines, raising=False)
    assert "launcher.api.runs.Runs.estimate_lines" in text_answers(door_callables("launcher.api.runs"))
