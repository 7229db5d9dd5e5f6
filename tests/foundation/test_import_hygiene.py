"""The three worlds import only what they may (STYLE.md): checked in fresh interpreters."""

import json
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
