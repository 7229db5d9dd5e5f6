"""The three worlds import only what they may (STYLE.md): checked in fresh interpreters."""

import json
import os
import subprocess
import sys

import pytest

FORBIDDEN = {
    "launcher": {"textual", "torch", "tui"},
    "launcher.cli": {"textual", "torch", "tui", "pydantic", "mlflow", "asyncssh", "yaml"},
    "launcher.workload.validate": {"textual", "torch", "tui", "mlflow", "asyncssh"},
    "launcher.workload.plan": {"textual", "torch", "tui", "mlflow", "asyncssh"},
    "trainer.wire.config": {"torch", "textual", "rich", "asyncssh", "launcher", "tui"},
    "trainer.wire.protocol": {"torch", "textual", "rich", "asyncssh", "launcher", "tui", "pydantic", "yaml"},
    "tui.cli": {"torch", "textual", "mlflow", "asyncssh", "pydantic"},
}


def _modules_after_import(module: str) -> set[str]:
    code = f"import sys, json; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {name.split(".")[0] for name in json.loads(out.stdout)}


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_module_imports_nothing_forbidden(module):
    loaded = _modules_after_import(module)
    assert not (loaded & FORBIDDEN[module]), f"{module} pulled in {sorted(loaded & FORBIDDEN[module])}"


def test_launcher_and_tui_sources_never_import_torch():
    """Every launcher/tui/themes module, imported for real, leaves torch unloaded."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    modules = [
        ".".join(p.relative_to(root).with_suffix("").parts)
        for pkg in ("launcher", "tui", "themes")
        for p in sorted((root / pkg).rglob("*.py"))
        if p.name != "__main__.py"
    ]
    code = ("import sys, importlib\n"
            f"for m in {modules!r}:\n    importlib.import_module(m)\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_shared_vocabulary_imports_nothing_heavy():
    """Every ``trainer.wire`` module, imported for real, leaves torch and the trainer's other rooms unloaded:
    the launcher, the app and any user script import it on machines without torch."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    modules = [".".join(p.relative_to(root).with_suffix("").parts) for p in sorted((root / "trainer/wire").glob("*.py"))]
    code = ("import sys, importlib, json\n"
            f"for m in {modules!r}:\n    importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout))
    heavy = {name.split(".")[0] for name in loaded} & {"torch", "transformers", "datasets", "peft", "numpy", "yaml"}
    others = sorted(m for m in loaded if m.startswith("trainer.") and not m.startswith("trainer.wire"))
    assert len(modules) > 10 and not heavy and not others, (heavy, others)


def test_trainer_package_never_imports_operator_side():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "trainer"
    offenders = []
    for path in root.rglob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("import ", "from ")) and any(
                f" {name}" in stripped.split(" import")[0] + " " or stripped.startswith(f"import {name}")
                for name in ("textual", "rich", "asyncssh", "launcher", "tui")
            ):
                offenders.append(f"{path.name}: {stripped}")
    assert not offenders, offenders


def test_a_users_script_imports_the_reporter_where_the_docs_say_without_torch():
    """``from trainer.reporter import Reporter`` (docs/workload.md) keeps working, and costs no torch."""
    import subprocess
    import sys

    code = ("import sys; from trainer.reporter import Reporter; from trainer.wire.reporter import Reporter as R; "
            "assert Reporter is R; assert 'torch' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


HEAVY_FOR_A_LOOK = ("pydantic", "yaml", "asyncio", "asyncssh", "mlflow", "textual", "rich", "torch",
                    "importlib.metadata", "launcher.workload.model", "launcher.workload.plan", "launcher.backends.base",
                    "launcher.notify.sinks", "launcher.nettest.launch", "launcher.runs.launch")
"""What a command that only reads the store never needs: the workload's models (pydantic, YAML), the
backends and their event loop, the tracking and the sinks, the launch, the package metadata (``--version``
alone reads it). Each costs tens to hundreds of ms of a command whose own queries take a few ms
(BENCHMARKS.md: the run store at 100,000 runs)."""


@pytest.fixture(scope="module")
def a_kept_store(tmp_path_factory):
    """A data dir of 120 ended runs (more than ``runs`` shows), half with an ``output_dir`` whose owner
    recorded their safe step, and the app's settings file (its theme; no prices)."""
    from tests.support.many_runs import fill, run_id

    home = tmp_path_factory.mktemp("kept")
    fill(home, 0, 120, folders="all")
    for i in range(1, 120, 2):
        (home / "runs" / run_id(i) / "safe-step.json").write_text(json.dumps(
            {"name": "step-100", "step": 100, "written_at": 1_780_000_000.0}))
    (home / "settings.json").write_text(json.dumps({"theme": "fsdp-dark"}))  # $FSDP_TUI_HOME holds it too
    return home, run_id


@pytest.mark.parametrize("argv", [["runs"], ["runs", "--limit", "20"], ["runs", "--all", "--json"],
                                  ["show", "ODD"], ["show", "EVEN"], ["--help"]])
def test_a_command_that_reads_runs_loads_nothing_heavy(a_kept_store, argv):
    home, run_id = a_kept_store
    argv = [{"ODD": run_id(119), "EVEN": run_id(118)}.get(a, a) for a in argv]
    code = ("import sys, json\nfrom launcher.cli.main import main\n"
            f"try:\n    code = main({argv!r})\nexcept SystemExit as stop:\n    code = stop.code\n"
            "print(json.dumps([code, sorted(sys.modules)]), file=sys.stderr)")
    env = {**os.environ, "FSDP_TUI_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    code, loaded = json.loads(out.stderr.splitlines()[-1])
    assert code in (0, None), out.stderr
    assert out.stdout.strip()  # it said something: the runs, the run, the help
    heavy = sorted(m for m in HEAVY_FOR_A_LOOK if m in loaded)
    assert not heavy, f"fsdp-tui {' '.join(argv)} loaded {heavy}"


def test_the_presentation_room_loads_nothing_but_the_standard_library_and_words():
    """Every ``launcher.present`` module, imported for real, loads no room of the launcher but ``launcher.words``
    (the door's types it names are for the type checker only) and no event loop, SSH, tracking or terminal UI:
    a command that prints a table pays for the table."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    modules = [f"launcher.present.{p.stem}" for p in sorted((root / "launcher" / "present").glob("*.py"))
               if p.stem != "__init__"]
    code = ("import sys, importlib, json\n"
            f"for m in {modules!r}:\n    importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout))
    rooms = sorted(m for m in loaded if m.startswith("launcher.") and not m.startswith(("launcher.present", "launcher.words")))
    heavy = sorted({m.split(".")[0] for m in loaded} & {"asyncio", "subprocess", "asyncssh", "mlflow", "textual", "rich",
                                                         "torch", "pydantic", "yaml", "tui", "trainer"})
    assert len(modules) >= 5 and not rooms and not heavy, (rooms, heavy)
