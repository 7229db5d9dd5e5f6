"""A run's checkpoints: step, complete or not, size, age; resume from one, export one, delete one."""

from __future__ import annotations

import time
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Header, Label

from launcher.checkpoints import CheckpointInfo, checkpoints_of_run, deletable
from tui.widgets.footer import FitFooter


class CheckpointsScreen(Screen):
    DEFAULT_CSS = """
    CheckpointsScreen #where { height: 1; padding: 0 1; background: $panel; }
    """
    BINDINGS = [
        Binding("r", "resume", "resume from"),
        Binding("x", "export", "export to HF"),
        Binding("d", "delete", "delete"),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.root: Path | None = None
        self.ckpts: list[CheckpointInfo] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("", id="where")
        yield DataTable(cursor_type="row")
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = f"checkpoints of {self.run_id}"
        self.query_one(DataTable).add_columns("step", "complete", "size", "age", "path")
        self.reload()

    def reload(self) -> None:
        from launcher.store import RunStore

        record = RunStore(self.app.home).get_run(self.run_id)
        self.root, self.ckpts = checkpoints_of_run(record) if record else (None, [])
        self.query_one("#where", Label).update(
            str(self.root) if self.root else "this run's script keeps its own checkpoints (no parameters.output_dir)")
        table = self.query_one(DataTable)
        table.clear()
        now = time.time()
        for c in self.ckpts:
            age = now - c.mtime
            age_text = f"{age / 3600:.1f} h" if age > 3600 else f"{age / 60:.0f} min"
            table.add_row(str(c.step), "yes" if c.complete else "NO", f"{c.size_bytes / 2**20:.1f} MiB", age_text,
                          str(c.path), key=str(c.path))

    def selected(self) -> CheckpointInfo | None:
        table = self.query_one(DataTable)
        if not self.ckpts:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next(c for c in self.ckpts if str(c.path) == key)

    def action_resume(self) -> None:
        from launcher.store import RunStore

        c = self.selected()
        if c is None or not c.complete:
            self.notify("pick a complete checkpoint", severity="warning")
            return
        record = RunStore(self.app.home).get_run(self.run_id)
        if not record.summary.workload_path:
            self.notify("no workload file recorded for this run", severity="warning")
            return
        self.app.launch_workload(Path(record.summary.workload_path),
                                 [f"parameters.checkpoint.resume={c.path}"])

    def action_export(self) -> None:
        c = self.selected()
        if c is None or not c.complete:
            self.notify("pick a complete checkpoint", severity="warning")
            return
        self.export(c)

    @work(exclusive=True, group="export")
    async def export(self, c: CheckpointInfo) -> None:
        import asyncio
        import sys

        out = c.path.parent.parent / "hf" / f"export-{c.path.name}"
        self.notify(f"exporting {c.path.name} to {out} ...")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "trainer.export", str(c.path), str(out),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        output, _ = await proc.communicate()
        if proc.returncode == 0:
            self.notify(f"exported to {out}")
        else:
            self.notify(f"export failed: {output.decode(errors='replace').strip().splitlines()[-1:]}",
                        severity="error", timeout=10)

    def action_delete(self) -> None:
        import shutil

        from tui.screens.confirm import ConfirmModal

        c = self.selected()
        if c is None:
            return
        if not deletable(self.ckpts, c):
            self.notify("this is the newest complete checkpoint: it is kept", severity="warning")
            return

        def done(yes: bool | None) -> None:
            if yes:
                shutil.rmtree(c.path, ignore_errors=True)
                self.reload()

        self.app.push_screen(ConfirmModal(f"Delete checkpoint {c.path.name}?"), done)

    def action_back(self) -> None:
        self.app.pop_screen()
