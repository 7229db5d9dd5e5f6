"""The door's own rules: every name a room hands out resolves (the core's types load on first use), every
public method says what it returns, and none returns a bare dict (JSON serialisers excepted)."""

from __future__ import annotations

import importlib
import inspect

import pytest

ROOMS = ["runs", "launching", "run_files", "checkpoints", "sweeps", "nodes", "nettests", "doctor", "records"]
SERIALISERS = {"to_dict", "figures_json", "extras_json"}
"""JSON for ``--json`` output: a dict is what they are for."""


def _public_methods(module):
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isclass(value) and value.__module__ == module.__name__:
            for attr, member in vars(value).items():
                if attr.startswith("_") or attr in SERIALISERS:
                    continue
                fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                fn = getattr(fn, "func", fn)  # cached_property
                if inspect.isfunction(fn):
                    yield f"{name}.{attr}", fn


@pytest.mark.parametrize("room", ROOMS)
def test_every_name_a_room_hands_out_resolves_and_every_method_returns_a_type(room):
    module = importlib.import_module(f"launcher.api.{room}")
    assert [n for n in module.__all__ if not hasattr(module, n)] == []
    methods = dict(_public_methods(module))
    assert methods, room
    for name, fn in methods.items():
        returns = inspect.signature(fn).return_annotation
        assert returns is not inspect.Signature.empty, f"{name} does not say what it returns"
        assert not str(returns).replace(" ", "").startswith(("dict", "Dict")), f"{name} returns {returns}"
        assert fn.__doc__, f"{name} has no docstring"


def test_the_client_hands_out_every_room_on_first_use(tmp_path):
    from launcher.api import Client

    client = Client(tmp_path)
    for room in (r for r in ROOMS if r != "launching"):  # a module the runs room calls, not a room
        assert getattr(client, room).home == tmp_path
    assert client.runs is client.runs  # one per client


def _lazy_names(tree) -> set[str]:
    import ast

    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_names":
            table = node.args[1]
            if isinstance(table, ast.Name):
                table = next(n.value for n in tree.body
                             if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == table.id)
            names |= {e.value.split("=")[0] for v in table.values for e in v.elts}
    return names


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_imports_what_its_own_code_uses_of_the_names_it_hands_out_on_first_use(room):
    """A module's own functions look names up in its globals, never through its ``__getattr__``: a name a
    room hands out on first use must be imported where the room's code uses it (else NameError at run time)."""
    import ast
    from pathlib import Path

    path = Path(importlib.import_module(f"launcher.api.{room}").__file__)
    tree = ast.parse(path.read_text())
    lazy = _lazy_names(tree)
    unbound = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        local = {a.asname or a.name for n in ast.walk(fn) if isinstance(n, ast.ImportFrom) for a in n.names}
        unbound += [f"{fn.name}: {n.id} (line {n.lineno})" for stmt in fn.body for n in ast.walk(stmt)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in lazy - local]
    assert unbound == []
