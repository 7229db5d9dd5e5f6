"""The workload editor: YAML with highlighting, live problems, help for the key under the cursor,
and the per-node plan preview. Validation runs in a worker, debounced."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Header, Input, Label, Static, TabbedContent, TabPane, TextArea

from launcher.workload.cursor import key_path_at
from launcher.workload.problems import Problem
from tui.widgets.footer import FitFooter
from tui.widgets.problems import ProblemsTable

DEBOUNCE_S = 0.3


@dataclass
class Validated(Message):
    """The result of one validation pass for buffer version ``version``."""

    version: int
    problems: list[Problem]
    plan_text: str


class EditorScreen(Screen):
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
        Binding("ctrl+p", "focus_problems", "problems", show=False),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.version = 0
        self.timer: Timer | None = None
        self.problems: list[Problem] = []

    def compose(self) -> ComposeResult:
        yield Header()
        text = self.path.read_text(encoding="utf-8", errors="replace") if self.path.exists() else ""
        with Horizontal(id="main"):
            yield TextArea.code_editor(text, language="yaml", id="yaml")
            with Vertical(id="side"):
                with TabbedContent():
                    with TabPane("Problems", id="tab-problems"):
                        yield ProblemsTable()
                    with TabPane("Plan", id="tab-plan"):
                        yield Static("", id="plan")
                yield Static("", id="help")
                yield Input(placeholder="--set overrides, e.g. parameters.max_steps=20 (space separated)",
                            id="overrides")
        yield Label("", id="status")
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = f"fsdp-tui: {self.path}"
        self.query_one(TextArea).focus()
        self.schedule()

    @property
    def overrides(self) -> list[str]:
        return self.query_one("#overrides", Input).value.split()

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        self.schedule()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.schedule()

    def schedule(self) -> None:
        self.version += 1
        if self.timer is not None:
            self.timer.stop()
        self.timer = self.set_timer(DEBOUNCE_S, self._validate_now)

    def _validate_now(self) -> None:
        self.validate(self.query_one(TextArea).text, self.version, self.overrides)

    @work(thread=True, exclusive=True, group="validate")
    def validate(self, text: str, version: int, overrides: list[str]) -> None:
        from launcher.runs.launch import render_plan_text
        from launcher.workload.load import plan_file

        planned = plan_file(self.path, overrides, home=self.app.home, run_id="<run-id>", text=text)
        plan_text = "fix the errors to see the plan"
        if planned.plan is not None:
            plan_text = render_plan_text(planned.plan)
        self.post_message(Validated(version, planned.problems, plan_text))

    def on_validated(self, message: Validated) -> None:
        if message.version != self.version:
            return  # an older buffer
        self.problems = message.problems
        self.query_one(ProblemsTable).show(message.problems)
        self.query_one("#plan", Static).update(message.plan_text)
        errors = sum(p.is_error for p in message.problems)
        warnings = len(message.problems) - errors
        state = "valid" if not errors else f"{errors} error(s)"
        self.query_one("#status", Label).update(f"{state}, {warnings} warning(s)  |  ctrl+s save  ctrl+r launch")

    def on_problems_table_jump(self, message: ProblemsTable.Jump) -> None:
        area = self.query_one(TextArea)
        area.cursor_location = (message.line - 1, message.column - 1)
        area.focus()

    def on_text_area_selection_changed(self, event: TextArea.SelectionChanged) -> None:
        from launcher.workload.schema_walk import help_for

        area = self.query_one(TextArea)
        path = key_path_at(area.text, event.selection.end[0])
        info = help_for(path, {"command": "x"} if "\ncommand:" in area.text else None) if path else None
        help_box = self.query_one("#help", Static)
        if info is None:
            help_box.update("")
            return
        choices = f"  one of: {', '.join(info.choices)}" if info.choices else ""
        help_box.update(f"{info.path}: {info.type_name} = {info.default}{choices}\n{info.description}")

    def action_save(self) -> bool:
        try:
            self.path.write_text(self.query_one(TextArea).text, encoding="utf-8")
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
            self.app.launch_workload(self.path, self.overrides)

    def action_focus_problems(self) -> None:
        self.query_one(ProblemsTable).focus()

    def action_back(self) -> None:
        self.app.pop_screen()
