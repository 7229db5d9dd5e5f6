"""The home screen's sweeps: id, state, variants done, started (newest first)."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import DataTable

from launcher.api.sweeps import SweepRecord

_STYLE = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan"}


class SweepsTable(DataTable):
    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.sweeps: list[SweepRecord] = []

    def on_mount(self) -> None:
        self.add_columns("sweep", "state", "variants", "started", "detail")

    def show(self, sweeps: list[SweepRecord]) -> None:
        if sweeps == self.sweeps:
            return
        self.sweeps = sweeps
        keep = self.cursor_row
        self.clear()
        for s in sweeps:
            done = sum(v.state == "succeeded" for v in s.variants)
            started = time.strftime("%m-%d %H:%M", time.localtime(s.started_at)) if s.started_at else "-"
            self.add_row(s.sweep_id, Text(s.state, style=_STYLE.get(s.state, "")),
                         Text(f"{done}/{len(s.variants)}", justify="right"), started, s.detail[:60], key=s.sweep_id)
        if sweeps:
            self.move_cursor(row=min(keep, len(sweeps) - 1))
