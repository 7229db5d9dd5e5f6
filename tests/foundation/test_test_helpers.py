"""What tests share lives in ``tests/support/`` only: no test module imports another test module or a
``conftest.py`` (a helper or a constant taken from a test file couples two rooms and hides the helper where
nobody looks for it; a conftest holds fixtures, which pytest hands out without an import)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def _imported_modules(node: ast.AST, package: list[str]) -> list[str]:
    """The modules an import statement may load: ``from a.b import c`` may be ``a.b`` or ``a.b.c``; a relative
    one is read from ``package`` (the importing file's own)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = package[:len(package) - node.level + 1] if node.level else []
    module = ".".join([*base, *([node.module] if node.module else [])])
    return [module, *(f"{module}.{alias.name}" for alias in node.names)]


def _imported_test_modules(path: Path, source: str | None = None) -> list[str]:
    found = []
    rel = path.relative_to(TESTS.parent)
    package = list(rel.parent.parts)
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text, str(path))):
        for name in dict.fromkeys(_imported_modules(node, package)):
            parts = name.split(".")
            if parts[0] == "tests" and any(part.startswith("test_") or part == "conftest" for part in parts[1:]):
                found.append(f"{rel}:{node.lineno}: imports {name}")
                break
    return found


@pytest.mark.parametrize(("source", "caught"), [
    ("from tests.backends.ssh.test_ssh import ssh_cli", "tests.backends.ssh.test_ssh"),
    ("import tests.backends.ssh.test_ssh", "tests.backends.ssh.test_ssh"),
    ("from tests.backends.ssh import test_ssh", "tests.backends.ssh.test_ssh"),
    ("def f():\n    from tests.runs.read.test_local_runs import HOSTILE", "tests.runs.read.test_local_runs"),
    ("from .test_ssh import ssh_cli", "tests.backends.ssh.test_ssh"),
    ("from ..slurm.test_slurm import workload", "tests.backends.slurm.test_slurm"),
    ("from . import test_shell", "tests.backends.ssh.test_shell"),
    ("from tests.trainer.conftest import ROOT", "tests.trainer.conftest"),
    ("from .conftest import hosts", "tests.backends.ssh.conftest"),
    ("from tests.support.ssh_runs import ssh_cli", None),
    ("from tests.support import sshd", None),
    ("import pytest_asyncio", None),
], ids=["from-module", "import", "from-package", "inside-a-function", "relative", "relative-up", "relative-package",
        "conftest", "relative-conftest", "support", "support-package", "not-tests"])
def test_every_form_of_a_test_to_test_import_is_caught(source, caught):
    found = _imported_test_modules(TESTS / "backends" / "ssh" / "test_x.py", source)
    assert found == ([f"tests/backends/ssh/test_x.py:{source.count(chr(10)) + 1}: imports {caught}"] if caught else [])


def test_no_test_module_imports_another():
    found = [line for path in sorted(TESTS.rglob("*.py")) for line in _imported_test_modules(path)]
    assert not found, "move what they share into tests/support/ (fixtures: a conftest.py, not imported):\n" + \
        "\n".join(found)
