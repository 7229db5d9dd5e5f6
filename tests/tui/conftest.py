"""Fixtures for the app's tests: a private data dir, and local time pinned to UTC."""

from __future__ import annotations

import time

import pytest


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("FSDP_TUI_HOME", str(h))
    monkeypatch.setenv("FSDP_TUI_ASSETS", "/tmp/fsdp-tui-test-assets")
    return h


@pytest.fixture
def utc():
    """Local time is UTC, so recorded start times show the same on every machine."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TZ", "UTC")
        time.tzset()
        yield
    time.tzset()
