"""The interconnect self-test in the app: runs ``nettest`` on a workload's nodes (or opens a kept test)
and shows its table, the verdict and bars per size and per pair of nodes. The figures and the verdict
come from the core (:mod:`launcher.api.nettests`); this screen only shows them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Label, Static

from launcher.api.nettests import Nettests, rows
from launcher.present.nettest import headline, pair_bars
from launcher.words import fmt_bandwidth, fmt_message_size
from tui.app_base import AppBase
from tui.messages import NettestDone, NettestProgress
from tui.widgets.footer import FitFooter
from tui.widgets.header import Header

if TYPE_CHECKING:
    from launcher.api.nettests import Measured, NettestRecord


class NettestScreen(Screen):
    """``NettestScreen(path=...)`` runs a quick test of that workload; ``NettestScreen(record=...)``
    shows a kept one (``Nettests.list``)."""

    app = getters.app(AppBase)

    DEFAULT_CSS = """
    NettestScreen #nettest-title { padding: 0 1; background: $panel; width: 100%; height: 1; text-style: bold; }
    NettestScreen #nettest-status { padding: 0 1; height: auto; color: $text-muted; }
    NettestScreen #nettest-verdict { padding: 0 1; height: auto; }
    NettestScreen #nettest-verdict.-slow { color: $error; }
    NettestScreen DataTable { height: auto; max-height: 20; }
    NettestScreen #nettest-plots { height: 16; }
    NettestScreen PlotextPlot { width: 1fr; }
    """
    BINDINGS = [Binding("escape", "back", "back")]

    def __init__(self, path: Path | None = None, record: NettestRecord | None = None,
                 overrides: list[str] | None = None) -> None:
        super().__init__()
        self.path, self.record, self.overrides = path, record, list(overrides or [])

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("interconnect self-test", id="nettest-title")
        with VerticalScroll():
            yield Static("", id="nettest-status", markup=False)
            yield DataTable(id="nettest-table", zebra_stripes=True, cursor_type="row")
            yield Static("", id="nettest-verdict")
            yield Horizontal(id="nettest-plots")
        yield FitFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("scope", "collective", "size", "median", "spread", "algbw", "busbw")
        if self.record is not None:
            self._show_record(self.record)
        elif self.path is not None:
            self.query_one("#nettest-title", Label).update(f"interconnect self-test: {self.path.name}")
            self._status(f"starting a quick test on the nodes of {self.path} ...")
            self.run_test(self.path)

    def _status(self, text: str) -> None:
        self.query_one("#nettest-status", Static).update(text)

    def _show_record(self, record: NettestRecord) -> None:
        self.post_message(NettestDone(record.run_id, record.measured, record.nodes, record.problems or ("no result",)))

    @work(thread=True, exclusive=True, group="nettest")
    def run_test(self, path: Path) -> None:
        from launcher.api.nettests import Options
        from launcher.workload.load import plan_file

        planned = plan_file(path, self.overrides, home=self.app.home)
        plan = planned.plan
        if plan is None or plan.blockers:
            why = planned.result.errors[0].format() if plan is None and planned.result.errors else \
                "; ".join(plan.blockers if plan else ["invalid workload"])
            self.post_message(NettestDone("", None, (), (f"not tested: {why}",)))
            return
        def said(state: str, detail: str) -> None:
            self.post_message(NettestProgress(f"{state} {detail}"))

        outcome = self.app.client.nettests.run(plan, Options(quick=True), on_state=said)
        self.post_message(NettestDone(outcome.run_id, outcome.measured, outcome.nodes, outcome.problems))

    @on(NettestProgress)
    def _progress(self, message: NettestProgress) -> None:
        self._status(f"test run: {message.text}")

    @on(NettestDone)
    def _done(self, message: NettestDone) -> None:
        self.query_one("#nettest-title", Label).update(f"interconnect self-test {message.run_id}")
        verdict_box = self.query_one("#nettest-verdict", Static)
        if message.measured is None:
            self._status("no result")
            verdict_box.update("\n".join(message.problems))
            verdict_box.add_class("-slow")
            return
        m = message.measured
        judged = Nettests.judge(m, message.nodes)
        self._status("\n".join([headline(m), *(f"budget: {line}" for line in judged.cut_lines())]))
        table = self.query_one(DataTable)
        table.clear()
        for r in rows(m, message.nodes):
            table.add_row(r.scope, r.op.replace("_", "-"), fmt_message_size(r.nbytes), f"{r.median_s * 1e3:.2f} ms",
                          f"{r.spread:.0%}", fmt_bandwidth(r.algbw), fmt_bandwidth(r.busbw))
        # Nodes left out (not reached) come first: the figures below are of the others.
        unreached = [p for p in message.problems if ": not reached within the connect phase" in p]
        verdict_box.update("\n".join([*unreached, *judged.verdict_lines()]))
        verdict_box.set_class(bool(judged.verdict.findings or unreached), "-slow")
        self._plots(m)

    def _plots(self, m: Measured) -> None:
        from textual_plotext import PlotextPlot

        plots = self.query_one("#nettest-plots", Horizontal)
        plots.remove_children()
        by_size, by_pair = PlotextPlot(), PlotextPlot()
        plots.mount(by_size, by_pair)
        world = m.scope("world")
        figures = [f for f in (world.figures if world else ()) if f.op == "all_gather"]
        by_size.plt.title("whole world all-gather busbw (MB/s) per size")
        if figures:
            by_size.plt.bar([fmt_message_size(f.nbytes) for f in figures], [f.busbw / 1e6 for f in figures])
        by_pair.plt.title("all-gather busbw (MB/s) per pair of nodes" if m.pairs else "one node: no pairs")
        bars = pair_bars(m)
        if bars:
            by_pair.plt.bar([label for label, _bw in bars], [bw / 1e6 for _label, bw in bars])

    def action_back(self) -> None:
        self.app.pop_screen()
