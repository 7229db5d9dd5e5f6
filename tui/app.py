"""The fsdp-tui app: home, editor, run monitor; themes from data; every screen keyboard-first."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import App
from textual.binding import Binding
from textual.theme import Theme

from tui import settings
from tui.app_base import AppBase
from tui.collector import IdleCollector
from tui.launches import Launches
from tui.messages import (
    LaunchAsked,
    NettestAsked,
    RelaunchAsked,
    ResumeAsked,
    RunChosen,
    StoreFoundDamaged,
    SweepChosen,
    SweepLaunchAsked,
    WorkloadChosen,
)

if TYPE_CHECKING:
    from launcher.workload.overrides import Override


def _palette():
    from tui.palette import FsdpCommands

    return FsdpCommands


class FsdpTuiApp(AppBase):
    TITLE = "fsdp-tui"
    COMMANDS = App.COMMANDS | {_palette}
    BINDINGS = [
        Binding("q", "quit", "quit", tooltip="quit the app; runs keep going"),
        Binding("t", "next_theme", "theme", show=False),
        Binding("h", "home", "home", show=False),
        Binding("colon", "command_bar", "command", key_display=":",
                tooltip=":runs  :workloads  :ckpt RUN  :theme NAME  :q"),
        # Escape closes the Keys panel (ctrl+p -> Keys) before any screen sees it; without the panel the
        # binding stands aside (check_action) and escape goes where it always goes.
        Binding("escape", "hide_help_panel", "close keys", show=False, priority=True),
    ]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "hide_help_panel":
            return bool(self.screen.query("HelpPanel"))
        return True

    def __init__(self, home: Path, theme: str | None = None, workload: Path | None = None,
                 run_id: str | None = None, launch: bool = False, overrides: list[str] | None = None) -> None:
        super().__init__(home, [workload.resolve()] if workload else [])
        self.start_workload = workload
        self.start_run = run_id
        self.start_launch = launch
        self.start_overrides = overrides or []
        self.requested_theme = theme
        self.launches = Launches(self, open_run=self.open_run, open_editor=self.open_editor,
                                 open_sweep=self.open_sweep)
        """What this app launches, one at a time, and the runs it started."""
        self.collector = IdleCollector(self)
        """Python's garbage collector, run between keys while the app runs."""

    @property
    def launched(self) -> list[str]:
        """Runs started from this app: on quit, the ones still live are named with how to get back."""
        return self.launches.started

    def on_unmount(self) -> None:
        self.collector.stop()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        from themes import APP_VARIABLES

        return dict(APP_VARIABLES)

    def on_mount(self) -> None:
        self._register_themes()
        self.call_after_refresh(self.collector.start)  # once started: what start-up made is kept aside
        from tui.screens.home import HomeScreen

        self.push_screen(HomeScreen())
        if self.start_workload is not None and self.start_launch:
            self.launch_workload(self.start_workload, self.start_overrides)
        elif self.start_workload is not None:
            self.open_editor(self.start_workload)
        elif self.start_run is not None:
            self.open_run(self.start_run)

    def _register_themes(self) -> None:
        from launcher.paths import config_home
        from themes import DEFAULT_THEME, discover

        specs, errors = discover(config_home() / "themes")
        for spec in specs:
            self.register_theme(Theme(name=spec.name, variables=spec.variables, **spec.fields))
        self.own_themes = sorted(spec.name for spec in specs)
        """fsdp-tui's themes and the user's: what ``t`` cycles through (Textual's own stay reachable by name)."""
        for error in errors:
            self.notify(f"theme skipped: {error}", severity="warning", timeout=8)
        saved = settings.load().get("theme")
        wanted = self.requested_theme or saved or DEFAULT_THEME
        if wanted not in self.available_themes:
            fallback = saved if saved in self.available_themes else DEFAULT_THEME
            names = ", ".join(sorted(self.available_themes))
            self.notify(f"unknown theme '{wanted}', using {fallback} (themes: {names})", severity="warning")
            wanted = fallback
        self.keep_theme = False  # the start-up choice is saved only when it was asked for and exists
        self.theme = wanted
        self.keep_theme = True
        if self.requested_theme and wanted == self.requested_theme:
            settings.save(theme=wanted)

    def watch_theme(self, theme: str) -> None:
        if self.is_mounted and getattr(self, "keep_theme", False):
            settings.save(theme=theme)

    def action_next_theme(self) -> None:
        names = self.own_themes or sorted(self.available_themes)
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.notify(f"theme: {self.theme}")

    async def action_quit(self) -> None:
        """Quit, but never past an editor with unsaved text without asking (save, discard or stay)."""
        from tui.screens.editor import EditorScreen

        unsaved = [s for s in self.screen_stack if isinstance(s, EditorScreen) and s.unsaved]
        if not unsaved:
            self.exit()
            return
        editor = unsaved[-1]
        while self.screen is not editor:  # the question is asked over the text it is about
            self.pop_screen()
        editor.leave(lambda: self.call_later(self.action_quit))

    def action_home(self) -> None:
        while len(self.screen_stack) > 2:
            self.pop_screen()

    def action_command_bar(self) -> None:
        from tui.screens.command_bar import CommandBarModal

        self.push_screen(CommandBarModal(), lambda text: self.run_command(text) if text is not None else None)

    def run_command(self, text: str) -> None:
        """Do what a ``:`` command says; a bad one is explained in a notification."""
        from tui.commands import CommandError, parse_command

        try:
            command = parse_command(text)
        except CommandError as err:
            self.notify(str(err), severity="error", timeout=8)
            return
        if command.verb == "quit":
            self.call_later(self.action_quit)
        elif command.verb in ("runs", "workloads"):
            from tui.screens.home import HomeScreen

            self.action_home()
            home = self.screen
            assert isinstance(home, HomeScreen)
            if command.verb == "runs":
                home.focus_runs()
            else:
                home.focus_workloads()
        elif command.verb == "theme":
            if command.arg not in self.available_themes:
                names = ", ".join(sorted(self.available_themes))
                self.notify(f"unknown theme '{command.arg}' (themes: {names})", severity="error", timeout=8)
                return
            self.theme = command.arg
        elif command.verb == "ckpt" and command.arg is not None:  # parse_command gives ckpt its RUN
            self.open_checkpoints(command.arg)

    # -- what screens ask (tui.messages): each handler does what the message names -----------------

    @on(RunChosen)
    def _run_chosen(self, message: RunChosen) -> None:
        self.open_run(message.run_id)

    @on(SweepChosen)
    def _sweep_chosen(self, message: SweepChosen) -> None:
        self.open_sweep(message.sweep_id)

    @on(WorkloadChosen)
    def _workload_chosen(self, message: WorkloadChosen) -> None:
        self.open_editor(message.path)

    @on(LaunchAsked)
    def _launch_asked(self, message: LaunchAsked) -> None:
        self.launch_workload(message.path, message.overrides)

    @on(RelaunchAsked)
    def _relaunch_asked(self, message: RelaunchAsked) -> None:
        self.relaunch_run(message.run_id, message.overrides)

    @on(ResumeAsked)
    def _resume_asked(self, message: ResumeAsked) -> None:
        self.resume_run(message.run_id, message.checkpoint)

    @on(SweepLaunchAsked)
    def _sweep_launch_asked(self, message: SweepLaunchAsked) -> None:
        self.launch_sweep(message.path)

    @on(NettestAsked)
    def _nettest_asked(self, message: NettestAsked) -> None:
        self.open_nettest(message.path, overrides=message.overrides)

    @on(StoreFoundDamaged)
    def _store_found_damaged(self, message: StoreFoundDamaged) -> None:
        self.store_damaged(message.text)

    # -- opening screens, launching ----------------------------------------------------------------

    def open_checkpoints(self, run_prefix: str) -> None:
        """The checkpoints of the run whose id is or starts with ``run_prefix``."""
        from tui.screens.checkpoints import CheckpointsScreen

        try:
            run_id = self.client.runs.find(run_prefix)
        except LookupError as err:
            self.notify(str(err), severity="error", timeout=8)
            return
        self.push_screen(CheckpointsScreen(run_id))

    def store_damaged(self, message: str) -> None:
        """The run store cannot be read: say so in a screen (once), offer the repair, quit if declined."""
        from tui.screens.store_damaged import StoreDamagedModal

        if any(isinstance(screen, StoreDamagedModal) for screen in self.screen_stack):
            return

        def done(repaired: bool | None) -> None:
            if not repaired:
                self.exit(return_code=1, message=message)

        self.push_screen(StoreDamagedModal(message), done)

    def open_editor(self, path: Path) -> None:
        from tui.screens.editor import EditorScreen

        self.push_screen(EditorScreen(path))

    def open_nettest(self, path: Path, overrides: list[str]) -> None:
        """A quick interconnect test of the workload at ``path`` (with ``overrides``)."""
        from tui.screens.nettest import NettestScreen

        self.push_screen(NettestScreen(path=path, overrides=overrides))

    def open_run(self, run_id: str) -> None:
        from launcher.api.runs import StoreDamaged
        from tui.screens.monitor import RunMonitorScreen

        try:
            record = self.client.runs.get(run_id)
        except StoreDamaged as err:
            self.store_damaged(str(err))
            return
        if record is None:
            self.notify(f"no run '{run_id}'", severity="error")
            return
        # The monitor replays the run's record and follows it, timed from its recorded start (and end).
        self.push_screen(RunMonitorScreen(run_id, max(1, len(record.nodes)), recorded=record.summary))

    def launch_workload(self, path: Path, overrides: list[str]) -> None:
        """The workload at ``path`` as written, with ``overrides`` (``--set`` words) on top."""
        self.launches.workload(path, overrides)

    def relaunch_run(self, run_id: str, overrides: list[Override] | None = None) -> None:
        """A new run doing what ``run_id`` did (its recorded workload), with ``overrides`` on top."""
        self.launches.relaunch(run_id, overrides or [])

    def resume_run(self, run_id: str, name: str) -> None:
        """A new run of ``run_id``'s workload from its whole checkpoint ``name`` (as ``fsdp-tui resume``)."""
        self.launches.resume(run_id, name)

    def launch_sweep(self, path: Path) -> None:
        """Every variant of ``path``'s ``sweep:`` section (as ``fsdp-tui sweep FILE``), then the sweep's view."""
        self.launches.sweep(path)

    def open_sweep(self, sweep_id: str) -> None:
        from tui.screens.sweep import SweepScreen

        self.push_screen(SweepScreen(sweep_id=sweep_id))


def run_app(*, workload: Path | None = None, run_id: str | None = None, theme: str | None = None,
            launch: bool = False, overrides: list[str] | None = None) -> int:
    from launcher.paths import data_home

    home = data_home()
    app = FsdpTuiApp(home, theme=theme, workload=workload, run_id=run_id, launch=launch, overrides=overrides)
    app.run()
    _say_what_goes_on(home, app.launched)
    return app.return_code or 0


def _say_what_goes_on(home: Path, run_ids: list[str]) -> None:
    """After the app closes: the runs it started that are still going, and how to get back to them."""
    import sys

    from launcher.api import Client
    from launcher.api.runs import StoreDamaged

    try:
        runs = Client(home).runs
        records = [runs.get(run_id) for run_id in run_ids]
    except StoreDamaged:
        return  # the app said so already, and the exit message says it again
    for run_id, record in zip(run_ids, records, strict=True):
        if record is not None and not record.summary.state.is_final:
            print(f"run {run_id} goes on ({record.summary.state.value}): reopen it with fsdp-tui (home screen), "
                  f"follow it with fsdp-tui logs {run_id} --follow, stop it with fsdp-tui cancel {run_id}",
                  file=sys.stderr)

