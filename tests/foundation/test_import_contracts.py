"""The import contracts of pyproject.toml hold, and each one breaks when the import it forbids is added."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})


def test_the_tree_keeps_every_contract():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("launcher/workload/model.py", "import asyncio", "the workload is pure"),
    ("launcher/workload/plan.py", "import subprocess", "the workload is pure"),
    ("launcher/backends/agent/jobs.py", "import launcher.events", "the node agent needs only"),
    ("launcher/runs/policy.py", "import launcher.backends.ssh.connect", "runs and doctor ask the Backend"),
    ("launcher/doctor/judge.py", "import launcher.backends.fleet", "runs and doctor ask the Backend"),
    ("tui/screens/home.py", "import launcher.backends.base", "the app sees workload, runs and events"),
    ("tui/app.py", "import launcher.cli.run", "the app sees workload, runs and events"),
    ("launcher/workload/checks.py", "import launcher.runs.store", "launcher layers"),
    ("launcher/backends/fleet.py", "import launcher.runs.records", "launcher layers"),
    ("trainer/data.py", "import launcher.paths", "the trainer runs on nodes"),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    for name in ("launcher", "tui", "trainer", "themes"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(f"{line}  # noqa\n" + target.read_text())
    out = _lint(tmp_path)
    assert out.returncode != 0, out.stdout[-2000:]
    broken = [x for x in out.stdout.splitlines() if x.rstrip().endswith("BROKEN")]
    assert any(contract in x for x in broken) or contract in out.stdout.split("Broken contracts")[-1], out.stdout
