"""What the model answers as it learns: each prompt with its answer per step (``logging.samples``), read
from the run's record as it grows; or two checkpoints' answers side by side. The text is decoded and made
printable once, in :mod:`launcher.runs.core.samples`; the lines come from
:mod:`launcher.present.samples`: this screen only reads and draws them."""

from __future__ import annotations

from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Label, Log

from tui.app_base import AppBase
from tui.messages import SamplesRead
from tui.screens.from_worker import unless_taken_apart
from tui.widgets.footer import FitFooter
from tui.widgets.header import Header

REFRESH_S = 2.0
NO_SAMPLES = ("no samples yet: set parameters.logging.samples (prompts or eval_rows) to see what the model "
              "answers as it learns")


class SamplesScreen(Screen):
    """A run's samples, each prompt with its answer at every sampled step (refreshed while open); with
    ``steps`` (two checkpoint steps), those two steps' answers side by side instead."""

    app = getters.app(AppBase)

    DEFAULT_CSS = """
    SamplesScreen #samples-said { height: auto; padding: 0 1; background: $panel; }
    SamplesScreen Log { height: 1fr; }
    """
    BINDINGS = [Binding("escape", "back", "back")]

    def __init__(self, run_id: str, steps: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.run_id, self.steps = run_id, steps
        self.shown: list[str] | None = None
        """The lines drawn last (a refresh that finds the same draws nothing)."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("reading the run's samples ...", id="samples-said", markup=False)
        yield Log(max_lines=20_000, auto_scroll=False)
        yield FitFooter()

    def on_mount(self) -> None:
        self.title = (f"samples: {self.run_id}" if self.steps is None else
                      f"samples: {self.run_id}, step {self.steps[0]} beside step {self.steps[1]}")
        self.load()
        self.set_interval(REFRESH_S, self.load)

    def action_back(self) -> None:
        self.app.pop_screen()

    @work(thread=True, exclusive=True, group="samples")
    def load(self) -> None:
        """The run's samples read off the event loop; drawn on it when they changed."""
        from launcher.api.runs import RunNotFound

        try:
            sets = self.app.client.runs.samples(self.run_id)
        except RunNotFound:
            sets = []
        said, lines = self._lines(sets)
        if lines != self.shown:
            self.shown = lines
            self.post_message(SamplesRead(said, lines))

    @on(SamplesRead)
    def _samples_read(self, message: SamplesRead) -> None:
        with unless_taken_apart(self):
            self.draw(message.said, message.lines)

    def _lines(self, sets) -> tuple[str, list[str]]:
        from launcher.present.samples import history_lines, side_by_side_at, side_lines

        if not sets:
            return NO_SAMPLES, []
        if self.steps is None:
            steps = ", ".join(str(s.step) for s in sets)
            return f"answers at steps {steps} (newest last)", history_lines(sets)
        left, right, pairs = side_by_side_at(sets, self.steps[0], sets, self.steps[1])
        labels = [f"step {s.step}" if s is not None else "no samples by then" for s in (left, right)]
        said = (f"checkpoint {self.steps[0]}: {labels[0]}  |  checkpoint {self.steps[1]}: {labels[1]}  "
                "(the answers sampled at or before each checkpoint's step; '=' the same answer)")
        return said, side_lines(pairs, f"step {self.steps[0]}", f"step {self.steps[1]}",
                                max(60, self.app.size.width - 2))

    def draw(self, said: str, lines: list[str]) -> None:
        self.query_one("#samples-said", Label).update(said)
        log = self.query_one(Log)
        log.clear()
        log.write_lines(lines)
        log.scroll_home(animate=False)
