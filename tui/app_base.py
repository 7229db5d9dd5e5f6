"""The app as its screens see it, typed: the core's one door (:class:`launcher.api.Client`, for the data dir
the app shows), the workloads named on the command line, the runs marked for a comparison, and when the
user last pressed a key.

A screen reads it as ``app = getters.app(AppBase)`` (Textual's typed accessor). :class:`tui.app.FsdpTuiApp`
imports the screens it opens, so they cannot import it back; and what a screen asks the app to do is not
here at all: it posts one of :mod:`tui.messages`.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual import events
from textual.app import App

from launcher.api import Client


class AppBase(App):
    """Owns what every screen may read of the app (nothing here starts work or opens a screen)."""

    def __init__(self, home: Path, extra_workloads: list[Path]) -> None:
        super().__init__()
        self.home = home
        """Where runs, sweeps, tests and secrets are kept (``launcher.paths.data_home()`` outside tests)."""
        self.client = Client(home)
        """Everything a screen reads of runs, sweeps, checkpoints, nodes and tests, or asks of them."""
        self.extra_workloads = extra_workloads
        """Workload files named on the command line, listed on the home screen with the found ones."""
        self.marked_runs: list[str] = []
        """Runs marked on the home screen for a comparison (``space``, then ``c``), in marking order."""
        self.input_at = 0.0
        """When the last key, click or wheel turn came (``time.monotonic()``)."""

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseDown, events.MouseScrollDown, events.MouseScrollUp)):
            self.input_at = time.monotonic()
        await super().on_event(event)

    def input_within(self, seconds: float) -> bool:
        """Whether the user pressed a key (or clicked, or turned the wheel) in the last ``seconds``: a
        screen's periodic redraws wait a moment then, so that what the user did is drawn first."""
        return time.monotonic() - self.input_at < seconds
