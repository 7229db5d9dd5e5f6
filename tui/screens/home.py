"""Home: workloads to open or launch, and every run to open, relaunch or delete."""

from __future__ import annotations

import time
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label

from launcher.store import RunSummary


def find_workloads(extra: list[Path]) -> list[Path]:
    """Sample workloads shipped with fsdp-tui, plus YAML files in the current folder."""
    root = Path(__file__).resolve().parents[2] / "sample_workloads"
    found = sorted(root.rglob("*.yaml")) if root.is_dir() else []
    found += sorted(p for p in Path.cwd().glob("*.y*ml") if p.is_file())
    found += extra
    return list(dict.fromkeys(p.resolve() for p in found))


class HomeScreen(Screen):
    DEFAULT_CSS = """
    HomeScreen Label.section { padding: 0 1; background: $panel; width: 100%; text-style: bold; }
    HomeScreen #workloads { height: 1fr; }
    HomeScreen #runs { height: 1fr; }
    """
    BINDINGS = [
        Binding("enter", "open", "open", show=True),
        Binding("l", "launch", "launch workload"),
        Binding("d", "delete", "delete run"),
        Binding("space", "mark", "mark to compare"),
        Binding("c", "compare", "compare marked"),
        Binding("n", "clone", "clone run"),
        Binding("k", "checkpoints", "checkpoints"),
        Binding("tab", "focus_next", "next table", show=False),
        Binding("r", "reload", "refresh"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical():
            yield Label("Workloads  (enter: edit, l: launch)", classes="section")
            yield DataTable(id="workloads", cursor_type="row")
            yield Label("Runs  (enter: open, l: relaunch, n: clone, k: checkpoints, space+c: compare, d: delete)",
                        classes="section")
            yield DataTable(id="runs", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#workloads", DataTable).add_columns("workload", "folder")
        self.query_one("#runs", DataTable).add_columns("run", "state", "nodes", "started", "step", "loss", "eval")
        self.action_reload()
        self.set_interval(2.0, self.action_reload)

    def action_reload(self) -> None:
        self.load_runs()
        table = self.query_one("#workloads", DataTable)
        if table.row_count == 0:
            for path in find_workloads(self.app.extra_workloads):
                table.add_row(path.name, str(path.parent), key=str(path))

    @work(thread=True, exclusive=True, group="home-runs")
    def load_runs(self) -> None:
        from launcher.store import RunStore

        runs = RunStore(self.app.home).list_runs()
        self.app.call_from_thread(self._show_runs, runs)

    def _show_runs(self, runs: list[RunSummary]) -> None:
        table = self.query_one("#runs", DataTable)
        selected = table.cursor_row
        table.clear()
        for r in runs:
            started = time.strftime("%m-%d %H:%M", time.localtime(r.started_at)) if r.started_at else "-"
            step = f"{r.step or 0}/{r.max_steps}" if r.max_steps else str(r.step or "-")
            loss = f"{r.last_loss:.4f}" if r.last_loss is not None else "-"
            ev = f"{r.best_eval_loss:.4f}" if r.best_eval_loss is not None else "-"
            table.add_row(r.run_id, r.state.value, str(r.num_nodes), started, step, loss, ev, key=r.run_id)
        if runs:
            table.move_cursor(row=min(selected, len(runs) - 1))

    def _selected(self, table_id: str) -> str | None:
        table = self.query_one(table_id, DataTable)
        if table.row_count == 0:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def action_open(self) -> None:
        if self.focused is self.query_one("#runs"):
            run_id = self._selected("#runs")
            if run_id:
                self.app.open_run(run_id)
        else:
            path = self._selected("#workloads")
            if path:
                self.app.open_editor(Path(path))

    def action_mark(self) -> None:
        run_id = self._selected("#runs")
        if run_id is None:
            return
        marked = self.app.marked_runs
        if run_id in marked:
            marked.remove(run_id)
        else:
            marked.append(run_id)
            del marked[:-2]
        self.notify(f"marked for compare: {', '.join(marked) or 'none'}")

    def action_compare(self) -> None:
        from tui.screens.compare import CompareScreen

        marked = self.app.marked_runs
        if len(marked) != 2:
            self.notify("mark two runs with space first", severity="warning")
            return
        self.app.push_screen(CompareScreen(*marked))

    def action_checkpoints(self) -> None:
        from tui.screens.checkpoints import CheckpointsScreen

        run_id = self._selected("#runs")
        if run_id:
            self.app.push_screen(CheckpointsScreen(run_id))

    def action_clone(self) -> None:
        """A copy of the run's workload next to the original, opened in the editor."""
        from launcher.store import RunStore

        run_id = self._selected("#runs")
        record = RunStore(self.app.home).get_run(run_id) if run_id else None
        if record is None or not record.summary.workload_path:
            self.notify("this run has no workload file to clone", severity="warning")
            return
        source = Path(record.summary.workload_path)
        target = source.with_name(f"{source.stem}-clone.yaml")
        n = 2
        while target.exists():
            target, n = source.with_name(f"{source.stem}-clone{n}.yaml"), n + 1
        try:
            text = source.read_text() if source.exists() else (record.directory / "workload.yaml").read_text()
            target.write_text(text)
        except OSError as err:
            self.notify(f"cannot write {target}: {err.strerror}", severity="error")
            return
        self.app.open_editor(target)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row (the table handles the key itself): open it."""
        event.stop()
        if event.data_table.id == "runs":
            self.app.open_run(event.row_key.value)
        else:
            self.app.open_editor(Path(event.row_key.value))

    def action_launch(self) -> None:
        if self.focused is self.query_one("#runs"):
            from launcher.store import RunStore

            run_id = self._selected("#runs")
            summary = next((r for r in RunStore(self.app.home).list_runs() if r.run_id == run_id), None)
            if summary and summary.workload_path:
                self.app.launch_workload(Path(summary.workload_path), [])
            else:
                self.notify("this run has no workload file to relaunch", severity="warning")
        else:
            path = self._selected("#workloads")
            if path:
                self.app.launch_workload(Path(path), [])

    def action_delete(self) -> None:
        run_id = self._selected("#runs")
        if run_id is None:
            return
        from tui.screens.confirm import ConfirmModal

        def done(yes: bool | None) -> None:
            if not yes:
                return
            from launcher.store import RunStore

            try:
                RunStore(self.app.home).delete_run(run_id)
            except (LookupError, ValueError) as err:
                self.notify(str(err), severity="error")
            self.action_reload()

        self.app.push_screen(ConfirmModal(f"Delete run {run_id} and its local record?"), done)
