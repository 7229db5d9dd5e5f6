"""Every name a front end (``tui/``, ``launcher/cli/``) imports from the door is one the door hands out: it is
in that room's ``__all__`` and resolves. A room hands most names out on first use (a module ``__getattr__``), so
a misspelt one would otherwise import as nothing a type checker sees (``Any``) and fail only when run."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRONT_ENDS = ("tui", "launcher/cli")


def door_imports(source: str) -> list[tuple[int, str, str]]:
    """Each ``from launcher.api[.room] import NAME`` of ``source``: (line, module, name)."""
    return [(node.lineno, node.module, alias.name) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
            and (node.module == "launcher.api" or node.module.startswith("launcher.api."))
            for alias in node.names]


def misses(where: str, source: str) -> list[str]:
    """The door imports of ``source`` that name nothing the door hands out, each as ``where:line: why``."""
    out = []
    for line, module, name in door_imports(source):
        room = importlib.import_module(module)
        handed_out = getattr(room, "__all__", None)
        if handed_out is None:
            out.append(f"{where}:{line}: {module} has no __all__ (importing {name})")
        elif name not in handed_out:
            out.append(f"{where}:{line}: {name!r} is not in {module}.__all__")
        elif not hasattr(room, name):
            out.append(f"{where}:{line}: {module}.{name} is in __all__ but does not resolve")
    return out


def front_end_files() -> list[Path]:
    return sorted(p for d in FRONT_ENDS for p in (ROOT / d).rglob("*.py"))


def test_every_name_a_front_end_imports_from_the_door_is_handed_out_and_resolves():
    files = front_end_files()
    found = [imp for p in files for imp in door_imports(p.read_text())]
    assert len(found) > 50  # the walk sees the front ends' door imports (over a hundred of them)
    assert [m for p in files for m in misses(str(p.relative_to(ROOT)), p.read_text())] == []


@pytest.mark.parametrize("source, expect", [
    ("from launcher.api.runs import RunSummary, Runs", []),
    ("from launcher.api import Client", []),
    ("def f():\n    from launcher.api.runs import RunSumary\n", ["x.py:2: 'RunSumary' is not in launcher.api.runs.__all__"]),
    ("from launcher.api.nettests import NettestRecord as R, Nettest", ["x.py:1: 'Nettest' is not in launcher.api.nettests.__all__"]),
    ("from launcher.api.runs import _FROM", ["x.py:1: '_FROM' is not in launcher.api.runs.__all__"]),
    ("import launcher.api.runs\nfrom launcher.workload.plan import RunPlan", []),
])
def test_a_misspelt_or_private_name_is_caught(source, expect):
    assert misses("x.py", source) == expect


def test_a_name_in_all_that_does_not_resolve_is_caught(monkeypatch):
    import launcher.api.nodes as room

    monkeypatch.setattr(room, "__all__", [*room.__all__, "GpuHoldrs"])
    assert misses("x.py", "from launcher.api.nodes import GpuHoldrs") == [
        "x.py:1: launcher.api.nodes.GpuHoldrs is in __all__ but does not resolve"]
