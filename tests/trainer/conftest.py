"""Fixtures for the trainer's tests; what they call lives in ``tests/support/trainer/run.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.trainer.run import ASSETS


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from trainer.assets import resolve_model

    return Path(resolve_model("builtin:tiny-llama", ASSETS))
