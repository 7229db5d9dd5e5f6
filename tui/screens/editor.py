"""The workload editor: YAML with highlighting, templates for a new file, completion, live problems
with their fixes, help for the key under the cursor, and the per-node plan preview. Validation runs
in a worker, debounced."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input, Label, Static, TabbedContent, TabPane

from launcher.words import plural
from launcher.workload.complete import Sources
from launcher.workload.cursor import key_path_at
from launcher.workload.problems import Problem
from launcher.workload.templates import Template
from tui.app_base import AppBase
from tui.messages import LaunchAsked, NettestAsked, Reached, SourcesLoaded, Validated
from tui.widgets.completion import CompletionMenu, WorkloadArea
from tui.widgets.footer import FitFooter
from tui.widgets.header import Header
from tui.widgets.problems import ProblemsList

DEBOUNCE_S = 0.3


class EditorScreen(Screen):
    app = getters.app(AppBase)
    DEFAULT_CSS = """
    EditorScreen #main { height: 1fr; }
    EditorScreen TextArea { width: 3fr; }
    EditorScreen #side { width: 2fr; min-width: 40; }
    EditorScreen #side TabbedContent { height: 1fr; }
    EditorScreen #side ContentSwitcher { height: 1fr; }
    EditorScreen #help { height: auto; max-height: 6; padding: 0 1; background: $panel; }
    EditorScreen #status { height: 1; padding: 0 1; }
    EditorScreen #overrides { height: 3; }
    """
    BINDINGS = [
        Binding("ctrl+s", "save", "save"),
        Binding("ctrl+r", "launch", "launch"),
        Binding("f8", "next_problem", "next problem", tooltip="the cursor goes to it (shift+f8: the problems list)"),
        Binding("shift+f8", "focus_problems", "problems list", show=False),
        Binding("ctrl+t", "templates", "templates"),
        Binding("f2", "other_tab", "plan", tooltip="the Plan tab (each node's command) or the Problems tab"),
        Binding("ctrl+n", "nettest", "nettest", tooltip="test the interconnect of these nodes (quick nettest)"),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.version = 0
        self.timer: Timer | None = None
        self.problems: list[Problem] = []
        self.sources = Sources()
        self.shown_version = 0
        self.shown_once = False
        self.validations_shown = 0
        self.shown_text: dict[str, str] = {}
        self.reach_key: tuple | None = None
        """The hosts (and ssh settings) whose glance is shown or under way."""
        """The buffer version whose problems are shown (``version`` once validation caught up)."""
        self.saved_text = ""
        """The text as it is in the file (read at start, written by save): anything else is unsaved."""
        self.discarded = False
        """The user chose to throw the unsaved text away (on the way out)."""

    def compose(self) -> ComposeResult:
        yield Header()
        text = self.path.read_text(encoding="utf-8", errors="replace") if self.path.exists() else ""
        self.saved_text = text
        with Horizontal(id="main"):
            yield WorkloadArea.code_editor(text, language="yaml", id="yaml")
            with Vertical(id="side"):
                with TabbedContent():
                    with TabPane("Problems", id="tab-problems"):
                        yield ProblemsList()
                    with TabPane("Plan", id="tab-plan"):
                        yield Static("", id="reach")
                        yield Static("", id="plan")
                yield Static("", id="help")
                yield Input(placeholder="--set overrides, e.g. parameters.max_steps=20 (space separated)",
                            id="overrides")
        yield Label("", id="status")
        yield FitFooter()
        yield CompletionMenu()

    @property
    def area(self) -> WorkloadArea:
        return self.query_one(WorkloadArea)

    def on_mount(self) -> None:
        from launcher.workload.templates import is_blank

        self.title = f"fsdp-tui: {self.path}"
        self.area.focus()
        self.load_sources()
        self.schedule()
        if is_blank(self.area.text):
            self.action_templates()

    @work(thread=True, exclusive=True, group="sources")
    def load_sources(self) -> None:
        """Host aliases and secret names for completion, read once per editor, off the UI thread."""
        from launcher.paths import ssh_config_path
        from launcher.workload.complete import read_entries
        from launcher.workload.hosts import read_config_aliases

        base = self.path.parent

        def folders(prefix: str) -> list[str]:
            head, _, _ = prefix.rpartition("/")
            try:
                found = sorted(p for p in (base / head).iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                return []
            return [f"{head}/{p.name}" if head else p.name for p in found][:40]

        sources = Sources(read_config_aliases(ssh_config_path()), self.app.client.records.secrets.list(), folders,
                          functools.partial(read_entries, base))
        self.post_message(SourcesLoaded(sources))

    @on(SourcesLoaded)
    def _sources_loaded(self, message: SourcesLoaded) -> None:
        self.sources = self.area.sources = message.sources

    def action_templates(self) -> None:
        from launcher.workload.templates import is_blank, templates
        from tui.screens.templates import TemplateModal

        def chosen(template: Template | None) -> None:
            if template is not None:
                self.use_template(template)

        if is_blank(self.area.text):
            intro = (f"{self.path.name} is empty. Start from one of these (enter), or from nothing (escape); "
                     "ctrl+t shows this list again.")
        else:
            intro = (f"Replace the text of {self.path.name} with one of these (enter; ctrl+z brings your text "
                     "back), or keep it (escape).")
        self.app.push_screen(TemplateModal(templates(), intro), chosen)

    def use_template(self, template: Template) -> None:
        """Put ``template`` in the buffer (undo brings the old text back) with its first blank selected:
        what is typed replaces it, ``ctrl+space`` offers what fits there."""
        from textual.widgets.text_area import Selection

        area = self.area
        area.replace(template.text, area.document.start, area.document.end)
        for row, line in enumerate(template.text.split("\n")):
            blank = re.search(r"<[^>#]+>", line.split("#", 1)[0])
            if blank:
                area.selection = Selection((row, blank.start()), (row, blank.end()))
                break
        area.focus()

    @property
    def overrides(self) -> list[str]:
        return self.query_one("#overrides", Input).value.split()

    def on_text_area_changed(self, event: WorkloadArea.Changed) -> None:
        self.schedule()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.schedule()

    def schedule(self) -> None:
        self.version += 1
        if self.timer is not None:
            self.timer.stop()
        self.timer = self.set_timer(DEBOUNCE_S, self._validate_now)

    def _validate_now(self) -> None:
        self.validate(self.area.text, self.version, self.overrides)

    @work(thread=True, exclusive=True, group="validate")
    def validate(self, text: str, version: int, overrides: list[str]) -> None:
        from launcher.present.dry_run import dry_run_text
        from launcher.present.plan_preview import estimate_lines, fit_lines
        from launcher.workload.fixes import fix_for
        from launcher.workload.load import plan_file

        runs = self.app.client.runs
        planned = plan_file(self.path, overrides, home=self.app.home, run_id="<run-id>", text=text)
        plan_text = "fix the errors to see the plan"
        if planned.plan is not None:
            plan_text = dry_run_text(runs.dry_run(planned.plan)) + "\n" + "\n".join(
                [*fit_lines(runs.fit(planned.plan), self.path.name),
                 *estimate_lines(runs.estimate(planned.plan), self.path.name)]) + "\n"
        problems = [*planned.problems, *self.app.client.records.quarantine_problems(planned)]
        fixes = [fix_for(p, text) if p.file != "--set" else None for p in problems]
        self.post_message(Validated(version, problems, fixes, plan_text, planned.plan))

    @on(Validated)
    def _validated(self, message: Validated) -> None:
        if message.version != self.version:
            return  # an older buffer
        self.shown_version = message.version
        self.validations_shown += 1
        # Each update below re-lays out the screen: only what changed is updated, so typing stays quick.
        if message.problems != self.problems or not self.shown_once:
            self.problems = message.problems
            self.query_one(ProblemsList).show(message.problems, message.fixes)
        self.shown_once = True
        self._update("#plan", message.plan_text)
        self._glance(message.plan)
        errors = sum(p.is_error for p in message.problems)
        warnings = len(message.problems) - errors
        state = "valid" if not errors else plural(errors, "error")
        self._update("#status", f"{state}, {plural(warnings, 'warning')}  |  ctrl+space complete  f8 next problem  "
                     "shift+f8 problems list (f: fix)  f2 plan")

    def _glance(self, plan) -> None:
        """Check the named hosts (reachable, key known) when they change; typing never waits for it."""
        if plan is None:
            return
        remote = [n for n in plan.nodes if n.host is not None and not n.host.is_local]
        key = (tuple(n.host_display for n in remote), plan.workload.ssh)
        if key == self.reach_key:
            return
        self.reach_key = key
        if not remote:
            self._update("#reach", "")
            return
        self._update("#reach", "checking the hosts ...")
        self.reach(plan, key)

    @work(thread=True, exclusive=True, group="reach")
    def reach(self, plan, key: tuple) -> None:
        import asyncio

        answers = asyncio.run(self.app.client.nodes.reach(plan))
        lines = [f"{'✓' if a.ok else '✗'} {a.label}: {a.detail}" for a in answers]
        self.post_message(Reached(key, "\n".join(lines) + "\n"))

    @on(Reached)
    def _reached(self, message: Reached) -> None:
        if message.key == self.reach_key:
            self._update("#reach", message.lines)

    def _update(self, selector: str, text: str) -> None:
        if self.shown_text.get(selector) != text:
            self.shown_text[selector] = text
            self.query_one(selector, Static).update(text)

    def on_problems_list_jump(self, message: ProblemsList.Jump) -> None:
        area = self.area
        area.cursor_location = (message.line - 1, message.column - 1)
        area.focus()

    def on_problems_list_fix_chosen(self, message: ProblemsList.FixChosen) -> None:
        fix = message.fix
        self.area.replace(fix.insert, fix.start, fix.end)
        self.area.cursor_location = fix.start
        self.area.focus()  # what is typed next goes into the text, not to the list
        self.notify(f"fixed: {fix.title}")

    def on_problems_list_leave(self, message: ProblemsList.Leave) -> None:
        self.area.focus()

    def on_option_list_option_selected(self, event: CompletionMenu.OptionSelected) -> None:
        if event.option_list is self.query_one(CompletionMenu):  # a click on a candidate
            event.stop()
            self.area.accept_completion()

    def on_text_area_selection_changed(self, event: WorkloadArea.SelectionChanged) -> None:
        from launcher.workload.schema_walk import help_for

        area = self.area
        path = key_path_at(area.text, event.selection.end[0])
        info = help_for(path, {"command": "x"} if "\ncommand:" in area.text else None) if path else None
        if info is None:
            self._update("#help", "")
            return
        self._update("#help", f"{info.headline()}\n{info.description}".rstrip())

    @property
    def unsaved(self) -> bool:
        """The buffer differs from the file (a template picked for a new file counts)."""
        return not self.discarded and self.area.text.rstrip("\n") != self.saved_text.rstrip("\n")

    def action_save(self) -> bool:
        text = self.area.text
        if text and not text.endswith("\n"):
            text += "\n"  # POSIX text files end with one; some tools drop a last line without it
        try:
            self.path.write_text(text, encoding="utf-8")
            self.saved_text = text
        except OSError as err:
            self.notify(f"cannot save {self.path}: {err.strerror}", severity="error")
            return False
        self.notify(f"saved {self.path}")
        return True

    def action_launch(self) -> None:
        if any(p.is_error for p in self.problems):
            self.notify("fix the errors first (see Problems)", severity="error")
            return
        if self.action_save():
            self.post_message(LaunchAsked(self.path, self.overrides))

    def action_next_problem(self) -> None:
        """The cursor to the next problem after it (from the top again after the last); the text keeps the
        keys. The list highlights the problem; shift+f8 goes there to apply its fix."""
        located = [(i, p) for i, p in enumerate(self.problems) if p.file != "--set" and p.line > 0]
        if not located:
            self.notify("no problem in the text")
            return
        here = self.area.cursor_location
        after = [(i, p) for i, p in located if (p.line - 1, p.column - 1) > here]
        index, problem = min(after or located, key=lambda ip: (ip[1].line, ip[1].column))
        self.area.cursor_location = (problem.line - 1, problem.column - 1)
        self._select_blank(problem.line - 1, problem.column - 1)
        self.area.focus()
        self.query_one(ProblemsList).highlighted = index
        self.notify(f"{problem.line}:{problem.column} {problem.path + ': ' if problem.path else ''}{problem.message}",
                    severity="error" if problem.is_error else "warning", timeout=4)

    def _select_blank(self, row: int, column: int) -> None:
        """A template's blank (``<host-1>``) where the cursor landed is selected: what is typed replaces it."""
        from textual.widgets.text_area import Selection

        line = self.area.document.get_line(row)
        for blank in re.finditer(r"<[^<>#\s]+>", line.split("#", 1)[0]):
            if blank.start() <= column < blank.end() or line[column:blank.start()].strip() in ("", "-"):
                self.area.selection = Selection((row, blank.start()), (row, blank.end()))
                return

    def action_nettest(self) -> None:
        if any(p.is_error for p in self.problems):
            self.notify("fix the errors first (see Problems)", severity="error")
            return
        if self.action_save():
            self.post_message(NettestAsked(self.path, self.overrides))

    def action_other_tab(self) -> None:
        """Problems <-> Plan; the keys stay in the text."""
        tabs = self.query_one(TabbedContent)
        tabs.active = "tab-plan" if tabs.active == "tab-problems" else "tab-problems"

    def action_focus_problems(self) -> None:
        self.query_one(ProblemsList).focus()

    def action_back(self) -> None:
        if self.query_one(CompletionMenu).is_open:
            self.area.close_menu()
            return
        self.leave(self.app.pop_screen)

    def leave(self, then) -> None:
        """Call ``then`` unless the text has unsaved changes and the user chooses to stay (or the save fails)."""
        from tui.screens.unsaved import UnsavedModal

        if not self.unsaved:
            then()
            return

        def chosen(choice: str | None) -> None:
            if choice == "discard":
                self.discarded = True
            if choice == "discard" or (choice == "save" and self.action_save()):
                then()

        self.app.push_screen(UnsavedModal(self.path.name), chosen)
