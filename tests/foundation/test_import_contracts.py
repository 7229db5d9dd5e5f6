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
    ("launcher/runs/owner/policy.py", "import launcher.backends.ssh.connect", "runs and doctor ask the Backend"),
    ("launcher/doctor/judge.py", "import launcher.backends.fleet", "runs and doctor ask the Backend"),
    ("tui/screens/home.py", "import launcher.runs.core.store", "the app goes through one door"),
    ("tui/app.py", "import launcher.cli.run", "the app goes through one door"),
    ("launcher/workload/checks.py", "import launcher.runs.core.store", "launcher layers"),
    ("launcher/backends/fleet.py", "import launcher.runs.owner.recorder", "launcher layers"),
    ("trainer/data/rows.py", "import launcher.paths", "the trainer runs on nodes"),
    ("launcher/runs/read/view.py", "import launcher.runs.owner.recorder", "readers of a run's records never"),
    ("launcher/runs/core/store.py", "import launcher.runs.read.view", "runs: one owner writes"),
    ("launcher/backends/base.py", "import launcher.backends.fleet", "no import cycles"),
    ("trainer/model/packed_masks.py", "import trainer.model.packed_sdpa", "no import cycles"),
    ("launcher/cli/show.py", "import launcher.runs.core.store", "the CLI goes through one door"),
    # Indirectly: the CLI plans through the workload, which would then reach the secret store itself.
    ("launcher/workload/load.py", "import launcher.secrets", "the CLI goes through one door"),
    ("trainer/wire/protocol.py", "import torch", "the shared vocabulary is light"),
    ("trainer/wire/config.py", "import trainer.data.rows", "the shared vocabulary is light"),
    ("launcher/workload/data_check.py", "import trainer.data.dataset", "the operator's side imports only trainer.wire"),
    ("trainer/model/build.py", "import trainer.loop.train", "the trainer's rooms"),
    ("launcher/api/runs.py", "import textual", "the door serves both front ends"),
    ("launcher/present/nettest.py", "import asyncio", "the presentation room is pure"),
    ("launcher/present/comparison.py", "import launcher.runs.read.comparison", "the presentation room is pure"),
    ("launcher/present/stop_output.py", "import rich.text", "the presentation room is pure"),
    # The door never loads presentation (its lazy tables are read by tests/api/test_door_presentation.py).
    ("launcher/api/runs.py", "import launcher.present.comparison", "launcher layers"),
    # Indirectly: the CLI prints through the presentation room, which would then reach a room behind the door.
    ("launcher/present/samples.py", "import launcher.runs.core.samples", "the CLI goes through one door"),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    for name in ("launcher", "tui", "trainer", "themes"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.jsonl"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(f"{line}  # noqa\n" + target.read_text())
    out = _lint(tmp_path)
    assert out.returncode != 0, out.stdout[-2000:]
    broken = [x for x in out.stdout.splitlines() if x.rstrip().endswith("BROKEN")]
    assert any(contract in x for x in broken) or contract in out.stdout.split("Broken contracts")[-1], out.stdout


def test_no_module_reaches_itself_through_its_imports():
    """Every cycle, module by module (the acyclic contract sees cycles between siblings, not one through a
    package's own ``__init__``): Tarjan's strongly connected components over grimp's graph."""
    import grimp

    graph = grimp.build_graph("launcher", "tui", "trainer", "themes", cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    assert cycles == []
