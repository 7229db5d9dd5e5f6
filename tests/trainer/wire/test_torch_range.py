"""The trainer runs on the torch versions it is verified on and refuses older ones at start, in one line
that says what to do (the doctor applies the same bound)."""

import pytest

from trainer.wire.config import MIN_TORCH, torch_refusal


@pytest.mark.parametrize(("version", "refused"), [
    ("2.11.0+cu130", False), ("2.13.0+cpu", False), ("2.14.1", False), ("2.15.0", False), ("3.0.0", False),
    ("2.10.1+cu128", True), ("2.6.0", True), ("2.12.0.dev20260101", False), ("1.13.1", True),
])
def test_versions_below_the_verified_range_are_refused(version, refused):
    why = torch_refusal(version)
    assert (why is not None) is refused
    if refused:
        assert why.startswith(f"torch {version}: ") and f"pip install 'torch>={MIN_TORCH[0]}.{MIN_TORCH[1]}'" in why


def test_the_doctor_and_the_package_state_the_same_bound():
    from pathlib import Path

    from launcher.doctor.judge import MIN_TORCH_BUILTIN

    pyproject = (Path(__file__).parents[3] / "pyproject.toml").read_text()
    need = ".".join(map(str, MIN_TORCH))
    assert MIN_TORCH_BUILTIN == MIN_TORCH and f'"torch>={need}",' in pyproject
