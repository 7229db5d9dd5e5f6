"""Home: workloads to open or launch, and every run to open, relaunch or delete."""

from __future__ import annotations

from pathlib import Path

from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Input, Label

from launcher.words import plural
from tui.app_base import AppBase
from tui.messages import (
    LaunchAsked,
    LostNodesReaped,
    RelaunchAsked,
    RunChosen,
    RunsRead,
    StoreFoundDamaged,
    SweepChosen,
    SweepLaunchAsked,
    WorkloadChosen,
)
from tui.screens.from_worker import unless_taken_apart
from tui.screens.run_kinds import KnownKinds
from tui.screens.workload_files import find_workloads, folder_label
from tui.widgets.footer import FitFooter
from tui.widgets.header import Header
from tui.widgets.runs_table import RunsTable, Window
from tui.widgets.sweeps_table import SweepsTable

HOME_RUNS = 500
"""The newest runs the home screen reads and shows (a filter asks the store for older ones): its first
screen and every reload take the same time with ten runs kept or a hundred thousand."""


class HomeScreen(Screen):
    """Owns the workloads' table, the runs' table with its filter and sort, and the sweeps' table; what
    is picked there is asked of the app (:mod:`tui.messages`)."""

    app = getters.app(AppBase)
    DEFAULT_CSS = """
    HomeScreen Label.section { padding: 0 1; background: $panel; width: 100%; text-style: bold; }
    HomeScreen #workloads { height: 1fr; }
    HomeScreen #sweeps { height: auto; max-height: 6; }
    HomeScreen #sweeps, HomeScreen #sweeps-title { display: none; }
    HomeScreen.-has-sweeps #sweeps, HomeScreen.-has-sweeps #sweeps-title { display: block; }
    HomeScreen #filter-row { display: none; height: 1; }
    HomeScreen.-filtering #filter-row { display: block; }
    HomeScreen #filter-row Label { width: auto; padding: 0 1; color: $accent; text-style: bold; }
    """
    BINDINGS = [
        Binding("enter", "open", "open", show=True),
        # Short names, and keys the section titles already explain left out: one footer line at 80 columns.
        Binding("l", "launch", "launch", tooltip="launch the workload as written, or what the run ran again"),
        Binding("w", "sweep", "sweep", tooltip="launch every variant of the workload's sweep: section"),
        Binding("d", "delete", "delete", tooltip="delete the run and its local record"),
        # "space+c: compare" in the runs title
        Binding("space", "mark", "mark", show=False),
        Binding("c", "compare", "compare", show=False, tooltip="compare the marked runs (table, loss curves, diffs)"),
        Binding("n", "new", "new", tooltip="a new workload from a template, opened in the editor"),
        Binding("y", "clone", "copy", tooltip="copy the run's workload and open it in the editor"),
        Binding("k", "checkpoints", "ckpts", tooltip="the run's checkpoints"),
        Binding("slash", "filter", "filter", key_display="/", tooltip="filter runs by id, experiment, state"),
        Binding("s", "sort", "sort", tooltip="sort runs by the next column (S: reverse the order)"),
        Binding("S", "reverse_sort", "reverse", key_display="S", show=False),  # "s sort"'s tooltip says it
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("tab", "app.focus_next", "next table", show=False),
        Binding("shift+tab", "app.focus_previous", "previous table", show=False),
        Binding("r", "reload", "refresh", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.kinds = KnownKinds()
        """Each listed run's kind, asked once per run and state (not at every refresh)."""
        self.runs_read = False
        """The runs have been read whole (kinds, sweeps) at least once: a first look that comes later is
        dropped."""

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical():
            yield Label("Workloads  (enter: edit, l: launch, w: launch its sweep)", classes="section")
            yield DataTable(id="workloads", cursor_type="row")
            yield Label("Runs", id="runs-title", classes="section")
            with Horizontal(id="filter-row"):
                yield Label("filter /")
                yield Input(placeholder="words in the id, experiment or state (enter: keep, escape: clear)",
                            id="run-filter", compact=True)
            yield RunsTable(id="runs")
            yield Label("Sweeps  (enter: open)", id="sweeps-title", classes="section")
            yield SweepsTable(id="sweeps")
        yield FitFooter()

    @property
    def runs_table(self) -> RunsTable:
        return self.query_one(RunsTable)

    @property
    def filter_box(self) -> Input:
        return self.query_one("#run-filter", Input)

    def on_mount(self) -> None:
        self.query_one("#workloads", DataTable).add_columns("workload", "folder")
        self.filter_box.disabled = True  # keys go to the screen until "/" is pressed
        self._update_title()
        self._list_workloads()
        # The first screen: a screenful of the newest runs as the store has them, alone (two indexed
        # statements), before any other work competes with drawing them; the window of HOME_RUNS and the
        # rest once they are drawn (_after_first_look). A table measures every cell it is given: 500
        # rows cost Textual a few hundred ms, a screenful a tenth of that.
        self._first_look(max(self.app.size.height, 24))
        self.set_interval(2.0, self.action_reload)
        self.set_interval(30.0, self.reap_lost_nodes)

    def _after_first_look(self) -> None:
        """What the first look left for later: live runs adopted, each run's kind, the sweeps, and the
        leftovers of lost nodes."""
        self.load_runs()
        self.reap_lost_nodes()

    def action_reload(self) -> None:
        self.load_runs()
        self._list_workloads()

    def _list_workloads(self) -> None:
        table = self.query_one("#workloads", DataTable)
        if table.row_count == 0:
            for path in find_workloads(self.app.extra_workloads):
                table.add_row(path.name, folder_label(path.parent), key=str(path))

    def load_runs(self) -> None:
        """The runs again, with the filter as it is now (the store matches it when it keeps more runs
        than the table shows)."""
        self._read_runs(self.runs_table.filter_text)

    @work(thread=True, exclusive=True, group="home-first-look")
    def _first_look(self, rows: int) -> None:
        from launcher.api.runs import StoreDamaged

        try:
            self.post_message(self._newest("", kinds=None, sweeps=None, limit=min(rows, HOME_RUNS)))
        except StoreDamaged as err:
            self.post_message(StoreFoundDamaged(str(err)))

    @work(thread=True, exclusive=True, group="home-runs")
    def _read_runs(self, filter_text: str) -> None:
        from launcher.api.runs import StoreDamaged

        client = self.app.client
        try:
            client.runs.adopt()  # a run whose owner died gets a new one, which catches it up
            read = self._newest(filter_text, kinds={}, sweeps=client.sweeps.list())
            read.kinds = self.kinds.of(read.runs, client.runs.kinds)  # a run's folder read once per run and state
        except StoreDamaged as err:
            self.post_message(StoreFoundDamaged(str(err)))
            return
        self.post_message(read)

    def _newest(self, filter_text: str, *, kinds: dict | None, sweeps: list | None,
                limit: int | None = None) -> RunsRead:
        """The window of runs the table shows (its newest ``limit``; ``None``: ``HOME_RUNS``), as the store
        has it (two indexed statements)."""
        client = self.app.client
        total = client.runs.count()
        matching = filter_text.strip() if total > HOME_RUNS else ""
        return RunsRead(client.runs.list(limit=limit or HOME_RUNS, matching=matching), sweeps, kinds, total,
                        matching)

    @on(RunsRead)
    def _runs_read(self, message: RunsRead) -> None:
        with unless_taken_apart(self):
            if message.sweeps is None:  # the first look
                if not self.runs_read:  # (a whole read may have come first)
                    self._show_runs(message)
                self.call_after_refresh(self._after_first_look)
                return
            self.runs_read = True
            self._show_runs(message)
            self.query_one(SweepsTable).show(message.sweeps)
            self.set_class(bool(message.sweeps), "-has-sweeps")

    @work(thread=True, exclusive=True, group="home-leftovers")
    def reap_lost_nodes(self) -> None:
        """Nodes lost in earlier runs that answer again: their leftover processes are stopped; say so."""
        from launcher.api.runs import StoreDamaged

        try:
            reaped = self.app.client.nodes.reap_lost()
        except StoreDamaged as err:
            self.post_message(StoreFoundDamaged(str(err)))
            return
        if reaped:
            self.post_message(LostNodesReaped([r.line() for r in reaped]))

    @on(LostNodesReaped)
    def _lost_nodes_reaped(self, message: LostNodesReaped) -> None:
        for line in message.lines:
            self.notify(line, title="a lost node's leftovers stopped", timeout=20)

    def _show_runs(self, read: RunsRead) -> None:
        table = self.runs_table
        window = Window(read.total, read.matching, len(read.runs) >= HOME_RUNS)
        kinds = table.kinds if read.kinds is None else read.kinds
        # Live runs' durations move, so they are redrawn; a finished list that did not change is not, nor
        # one whose kinds, first read, mark no run differently.
        if (read.runs != table.runs or window != table.window or table.marks_differ(kinds)
                or any(not r.state.is_final for r in read.runs)):
            table.show(read.runs, window, kinds)
            self._update_title()
        else:
            table.kinds = kinds

    def _update_title(self) -> None:
        if not self.runs_table.runs:
            text = ("Runs: none yet. Pick a workload above: enter edits it, l launches it "
                    "(the samples run on this machine, no GPU needed)")
        else:
            marked = len(self.app.marked_runs)
            text = (f"Runs: {self.runs_table.describe()}  (enter: open, l: relaunch, space+c: compare"
                    + (f", {marked} marked)" if marked else ")"))
        self.query_one("#runs-title", Label).update(text)

    def focus_runs(self) -> None:
        self.runs_table.focus()

    def focus_workloads(self) -> None:
        self.query_one("#workloads", DataTable).focus()

    def action_filter(self) -> None:
        self.add_class("-filtering")
        box = self.filter_box
        box.disabled = False
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.runs_table.set_filter(event.value)
        self._update_title()
        if self.runs_table.window.total > HOME_RUNS:  # older runs than the table holds: the store looks
            self.load_runs()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not event.value:
            self.action_clear_filter()
            return
        self.runs_table.focus()

    def action_clear_filter(self) -> None:
        box = self.filter_box
        if not box.value and box.disabled:
            return
        box.value = ""
        self.runs_table.set_filter("")
        self.remove_class("-filtering")
        box.disabled = True
        self.runs_table.focus()
        self._update_title()

    def action_sort(self) -> None:
        self.runs_table.cycle_sort()
        self._update_title()

    def action_reverse_sort(self) -> None:
        self.runs_table.reverse_sort()
        self._update_title()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self._update_title()

    def _selected(self, table_id: str) -> str | None:
        table = self.query_one(table_id, DataTable)
        if table.row_count == 0:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def action_open(self) -> None:
        if self.focused is self.query_one("#sweeps"):
            sweep_id = self._selected("#sweeps")
            if sweep_id:
                self.post_message(SweepChosen(sweep_id))
        elif self.focused is self.query_one("#runs"):
            run_id = self._selected("#runs")
            if run_id:
                self.post_message(RunChosen(run_id))
        else:
            path = self._selected("#workloads")
            if path:
                self.post_message(WorkloadChosen(Path(path)))

    def action_mark(self) -> None:
        run_id = self._selected("#runs")
        if run_id is None:
            return
        marked = self.app.marked_runs
        if run_id in marked:
            marked.remove(run_id)
        else:
            marked.append(run_id)
        self.runs_table.set_marked(set(marked))
        self._update_title()
        self.notify(f"marked for compare: {plural(len(marked), 'run')}")

    def action_compare(self) -> None:
        from tui.screens.sweep import SweepScreen

        marked = self.app.marked_runs
        if len(marked) < 2:
            self.notify("mark two or more runs with space first", severity="warning")
            return
        self.app.push_screen(SweepScreen(run_ids=list(marked)))

    def action_checkpoints(self) -> None:
        from tui.screens.checkpoints import CheckpointsScreen

        run_id = self._selected("#runs")
        if run_id:
            self.app.push_screen(CheckpointsScreen(run_id))

    def action_new(self) -> None:
        """Pick a template, name the file (in the current folder), write it, open it in the editor."""
        from tui.screens.templates import new_workload

        def written(target: Path) -> None:
            self.query_one("#workloads", DataTable).add_row(target.name, folder_label(target.parent),
                                                            key=str(target))
            self.post_message(WorkloadChosen(target))

        new_workload(self, Path.cwd(), written)

    def action_clone(self) -> None:
        """A copy of the run's workload next to the original, opened in the editor."""
        run_id = self._selected("#runs")
        if run_id is None:
            return
        try:
            target = self.app.client.runs.clone(run_id)
        except LookupError as err:
            self.notify(str(err), severity="warning")
            return
        except OSError as err:
            self.notify(f"cannot write the copy: {err.strerror or err}", severity="error")
            return
        self.notify(f"copied the workload of {run_id} to {target}")
        self.post_message(WorkloadChosen(target))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row (the table handles the key itself): open it."""
        event.stop()
        key = event.row_key.value
        if key is None:
            return
        if event.data_table.id == "runs":
            self.post_message(RunChosen(key))
        elif event.data_table.id == "sweeps":
            self.post_message(SweepChosen(key))
        else:
            self.post_message(WorkloadChosen(Path(key)))

    def action_launch(self) -> None:
        if self.focused is self.query_one("#runs"):
            run_id = self._selected("#runs")
            if run_id:
                self.post_message(RelaunchAsked(run_id))
        else:
            path = self._selected("#workloads")
            if path:
                self.post_message(LaunchAsked(Path(path)))

    def action_sweep(self) -> None:
        path = self._selected("#workloads") if self.focused is self.query_one("#workloads") else None
        if path is None:
            self.notify("pick a workload with a sweep: section first", severity="warning")
            return
        self.post_message(SweepLaunchAsked(Path(path)))

    def action_delete(self) -> None:
        run_id = self._selected("#runs")
        if run_id is None:
            return
        from tui.screens.delete_run import DeleteRunModal

        def done(choice: str | None) -> None:
            if choice in ("files", "record"):
                self.delete_run(run_id, files=choice == "files")

        self.app.push_screen(DeleteRunModal(run_id, self.app.client.run_files.folders(run_id)), done)

    @work(group="delete", exclusive=False)
    async def delete_run(self, run_id: str, *, files: bool) -> None:
        """Forget the run (:func:`tui.screens.delete_run.forget_run`), then show the runs again."""
        from tui.screens.delete_run import forget_run

        if await forget_run(self, self.app.client, run_id, files=files):
            self.action_reload()

