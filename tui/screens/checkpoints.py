"""A run's checkpoints: step, complete or not, kind (full, or a LoRA run's adapters), size, age; resume from
one, export one (a LoRA adapter, or merged), delete one, and two checkpoints' answers side by side. The run's
own and, marked with their run, the ones it continued; what is whose is the launcher's rule (the listing
says it), never decided here."""

from __future__ import annotations

import time

from textual import getters, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Label

from launcher.api.checkpoints import CheckpointInfo, RunCheckpoints
from launcher.present.checkpoints import completeness
from tui.app_base import AppBase
from tui.messages import ResumeAsked
from tui.widgets.footer import FitFooter
from tui.widgets.header import Header


class CheckpointsScreen(Screen):
    app = getters.app(AppBase)
    DEFAULT_CSS = """
    CheckpointsScreen #where { height: auto; max-height: 3; padding: 0 1; background: $panel; }
    """
    BINDINGS = [
        Binding("r", "resume", "resume from"),
        Binding("x", "export", "export to HF"),
        Binding("X", "export_merged", "export merged", show=False,
                tooltip="A LoRA checkpoint: the adapter and the base model with it merged"),
        Binding("v", "versus", "answers side by side",
                tooltip="Mark a checkpoint, then v on another: the samples at both steps side by side"),
        Binding("d", "delete", "delete"),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.ckpts: list[CheckpointInfo] = []
        self.listing: RunCheckpoints | None = None
        self.marked: CheckpointInfo | None = None
        """The checkpoint whose answers the next ``v`` puts beside the selected one's."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("", id="where")
        yield DataTable(cursor_type="row")
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = f"checkpoints of {self.run_id}"
        self.query_one(DataTable).add_columns("step", "complete", "kind", "size", "age", "name")
        self.query_one("#where", Label).update("asking the node that holds them ...")
        self.reload()

    @work(exclusive=True, group="ckpt-list")
    async def reload(self) -> None:
        from launcher.api.checkpoints import NoOutputDir

        where = self.query_one("#where", Label)
        try:
            listing = await self.app.client.checkpoints.list(self.run_id)
        except (NoOutputDir, LookupError) as err:
            self.ckpts, self.listing = [], None
            where.update(str(err))
            self._show()
            return
        self.ckpts, self.listing = list(listing.checkpoints), listing
        if listing.error:
            where.update(f"cannot reach {listing.label}: {listing.error}")
        elif not self.ckpts:
            where.update(f"no checkpoints yet in {listing.label}: {listing.root} (the trainer saves one every "
                         "parameters.checkpoint.every_steps steps, and at the end)")
        else:
            where.update(f"{listing.label}: {listing.root}")
        self._show()

    def _show(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        now = time.time()
        for c in self.ckpts:
            age = now - c.mtime
            age_text = f"{age / 3600:.1f} h" if age > 3600 else f"{age / 60:.0f} min"
            mark = " (marked)" if self.marked is not None and self.marked.path == c.path else ""
            whose = f" ({self.listing.whose_words(c)})" if self.listing and self.listing.whose(c) != "own" else ""
            table.add_row(str(c.step), completeness(c), c.kind, f"{c.size_bytes / 2**20:.1f} MiB", age_text,
                          c.name + whose + mark, key=c.path)

    def selected(self) -> CheckpointInfo | None:
        table = self.query_one(DataTable)
        if not self.ckpts:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next(c for c in self.ckpts if c.path == key)

    def action_resume(self) -> None:
        c = self.selected()
        if c is None or not c.complete:
            self.notify(f"pick a complete checkpoint{f': {c.why}' if c is not None and c.why else ''}",
                        severity="warning")
            return
        # A checkpoint this run continued is its writer's: the resume is of that run, from it.
        run_id = c.run_id if self.listing and self.listing.whose(c) == "continued" and c.run_id else self.run_id
        self.notify(f"resuming run {run_id} from {c.name} (where its whole copy is)")
        self.post_message(ResumeAsked(run_id, c.name))

    def action_export(self, merged: bool = False) -> None:
        c = self.selected()
        if c is None or not c.complete:
            self.notify(f"pick a complete checkpoint{f': {c.why}' if c is not None and c.why else ''}",
                        severity="warning")
            return
        if merged and not c.adapter:
            self.notify("a full fine-tune's checkpoint exports the whole model already: press x",
                        severity="warning")
            return
        self.export(c, merged)

    def action_export_merged(self) -> None:
        self.action_export(merged=True)

    @work(exclusive=True, group="export")
    async def export(self, c: CheckpointInfo, merged: bool = False) -> None:
        from launcher.api.checkpoints import CheckpointError

        what = "the LoRA adapter" + (" and the merged model" if merged else "") if c.adapter else \
            "a Hugging Face folder"
        self.notify(f"exporting {c.name} ({what}) on the node ...")
        try:
            result = await self.app.client.checkpoints.export(self.run_id, c.name, merged=merged)
        except CheckpointError as err:
            self.notify(f"export failed: {err}", severity="error", timeout=10)
            return
        self.notify(f"the trainer's own export of {c.name}: {result.path}" if result.reused
                    else f"exported to {result.path}" + (f" and {result.merged}" if result.merged else ""))

    def action_versus(self) -> None:
        from tui.screens.samples import SamplesScreen

        c = self.selected()
        if c is None:
            return
        if self.marked is None or self.marked.path == c.path:
            self.marked = None if self.marked is not None else c
            self.notify(f"{c.name} marked: v on another checkpoint puts their answers side by side"
                        if self.marked else "unmarked")
            self._show()
            return
        self.app.push_screen(SamplesScreen(self.run_id, (self.marked.step, c.step)))

    def action_delete(self) -> None:
        from tui.screens.confirm import ConfirmModal

        c = self.selected()
        if c is None:
            return
        why = self.listing.why_kept(c) if self.listing is not None else "not listed yet"
        if why:
            self.notify(why, severity="warning")
            return

        def done(yes: bool | None) -> None:
            if yes:
                self.delete(c)

        self.app.push_screen(ConfirmModal(f"Delete checkpoint {c.name}?"), done)

    @work(exclusive=True, group="ckpt-delete")
    async def delete(self, c: CheckpointInfo) -> None:
        from launcher.api.checkpoints import CheckpointError

        try:
            await self.app.client.checkpoints.delete(self.run_id, c.name)
        except CheckpointError as err:
            self.notify(f"not deleted: {err}", severity="error", timeout=10)
        self.reload()

    def action_back(self) -> None:
        self.app.pop_screen()
