"""What a newcomer meets in the app's first hour, under Pilot: every key where the footer and the docs say,
and words where there would be a blank (the editor's help, the first seconds of a run)."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.events import NodeState, RunState
from tests.tui.support import wait_for
from tui.app import FsdpTuiApp
from tui.screens.editor import EditorScreen
from tui.screens.monitor import RunMonitorScreen


def _record_run(home: Path, run_id: str, lines: dict[int, list[str]], records: list[dict], state: RunState,
                nodes: int = 2) -> None:
    """A run's local record, as the launcher writes it."""
    from launcher.runs.core.store import RunStore
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    hosts = ", ".join(f"h{i}" for i in range(nodes))
    text = f"experiment_name: recorded\ncompute: {{num_accelerators: {nodes}, gpus_per_node: 1, hosts: [{hosts}]}}\ncommand: x\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id=run_id)
    store = RunStore(home)
    directory = store.create_run(plan, None, text)
    for rank, node_lines in lines.items():
        (directory / "nodes" / f"{rank}.log").write_text("\n".join(node_lines) + "\n")
        if state.is_final:
            store.set_node(run_id, rank, NodeState.EXITED, 0)
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    store.set_state(run_id, RunState.RUNNING, 1)
    if state != RunState.RUNNING:
        store.set_state(run_id, state, 1)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def _palette(pilot, words: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.press(*words)
    await pilot.pause(0.3)
    await pilot.press("enter")


async def test_escape_closes_the_keys_panel_and_stays_on_the_screen(home):
    _record_run(home, "run-keys", {0: ["a"], 1: ["b"]}, [], RunState.SUCCEEDED)
    app = FsdpTuiApp(home, run_id="run-keys")
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen))
        monitor = app.screen
        await _palette(pilot, "Keys")
        await wait_for(pilot, lambda: bool(monitor.query("HelpPanel")))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not monitor.query("HelpPanel"))
        assert app.screen is monitor  # the panel closed; the monitor stayed
        await pilot.press("escape")  # without the panel, escape is the screen's again: back home
        await wait_for(pilot, lambda: app.screen is not monitor)


async def test_editor_keys_help_and_templates_say_what_is_there(home, tmp_path):
    from textual.widgets import TabbedContent

    from tui.screens.templates import TemplateModal
    from tui.widgets.completion import WorkloadArea

    app = FsdpTuiApp(home, workload=tmp_path / "new.yaml")
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TemplateModal))
        assert str(app.screen.intro).startswith("new.yaml is empty.")
        titles = [t.title for t in app.screen.templates]
        await pilot.press(*["down"] * titles.index("N SSH hosts, built-in trainer"), "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        editor = app.screen
        area = editor.query_one(WorkloadArea)
        # The first blank is selected: typing replaces it.
        assert area.selected_text == "<host-0>"
        await pilot.press(*"gpu-a")
        assert area.document.get_line(area.cursor_location[0]).strip() == "- gpu-a"
        # f2: the Plan tab and back, the keys staying in the text.
        tabs = editor.query_one(TabbedContent)
        await pilot.press("f2")
        assert tabs.active == "tab-plan" and area.has_focus
        await pilot.press("f2")
        assert tabs.active == "tab-problems"
        # The help of the key under the cursor: words, no Python.
        row = next(i for i, line in enumerate(area.text.split("\n")) if "sharding:" in line)
        area.cursor_location = (row, 6)
        await wait_for(pilot, lambda: "sharding" in str(editor.query_one("#help").render()))
        shown = str(editor.query_one("#help").render())
        assert "one of auto, full_shard" in shown and "(default: auto)" in shown
        assert "Literal" not in shown and "``" not in shown and "'auto'" not in shown
        # ctrl+t on a file with text: the list says it replaces the text, not that the file is empty.
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: isinstance(app.screen, TemplateModal))
        assert "is empty" not in app.screen.intro and app.screen.intro.startswith("Replace the text of new.yaml")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is editor)
        assert "- gpu-a" in area.text


async def test_a_runs_first_seconds_say_what_it_waits_for_and_cpu_memory_has_a_bar(home):
    """Before any line and step: words, not blank boxes; then a CPU rank's RSS as a bar against the RAM."""
    from launcher.events import MetricsRecorded, NodeStateChanged, RunStateChanged
    from tests.tui.support import FedEvents
    from tests.tui.support import wait_for as _wait
    from trainer.wire.protocol import MetricRecord, RankMemory

    run = FedEvents()
    app = FsdpTuiApp(home)
    async with app.run_test(size=(150, 45)) as pilot:
        monitor = RunMonitorScreen("run-new", 1, events=run)
        await app.push_screen(monitor)
        run.put(RunStateChanged("run-new", RunState.RUNNING, 1))
        run.put(NodeStateChanged("run-new", 0, "this machine", NodeState.RUNNING))
        await _wait(pilot, lambda: "starting: no line yet" in str(monitor.query_one("#summary").render()))
        assert "running, no line yet" in str(monitor.pane(0).border_subtitle)
        titles = [str(t.render()) for t in monitor.query(".title")]
        assert "loss  (waiting for the first step)" in titles
        assert "eval loss  (waiting for the first evaluation)" in titles
        run.put(MetricsRecorded("run-new", MetricRecord(
            step=1, max_steps=10, loss=2.0, time=1.0, memory=(RankMemory(0, rss_gib=0.5, total_gib=16.0),))))
        await _wait(pilot, lambda: len(monitor.query("MemoryGauge")) == 1
                    and "RSS 0.5/16G" in str(monitor.query_one("MemoryGauge Label").render()))
        gauge = monitor.query_one("MemoryGauge")
        bar = gauge.query_one("ProgressBar")
        assert bar.display and bar.progress == 0.5 / 16 * 100
        assert "step 1/10" in str(monitor.query_one("#summary").render())


async def test_compare_shows_run_ids_and_no_sweep_keys(home):
    from tui.screens.sweep import SweepScreen
    from tui.widgets.comparison_table import ComparisonTable

    _record_run(home, "run-a1", {0: ["a"], 1: ["a"]}, [{"step": 1, "loss": 2.0}], RunState.SUCCEEDED)
    _record_run(home, "run-b2", {0: ["b"], 1: ["b"]}, [{"step": 1, "loss": 1.0}], RunState.SUCCEEDED)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        app.push_screen(SweepScreen(run_ids=["run-a1", "run-b2"]))
        await wait_for(pilot, lambda: isinstance(app.screen, SweepScreen) and app.screen.loaded >= 1)
        table = app.screen.query_one(ComparisonTable)
        assert [str(c.label) for c in table.columns.values()][:2] == ["run", "variant"]
        assert str(table.get_row_at(0)[0]) == "run-a1" and str(table.get_row_at(1)[0]) == "run-b2"
        footer = {b.binding.action for b in app.screen.active_bindings.values() if b.binding.show and b.enabled}
        assert "cancel" not in footer and "open" in footer  # no sweep here: no "x cancel sweep" in the footer
        await pilot.press("x")  # nothing to cancel, and nothing asked
        assert isinstance(app.screen, SweepScreen)


async def test_the_workloads_table_is_in_the_order_it_shows(home):
    from textual.widgets import DataTable

    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.screen.query("#workloads") and app.screen.query_one("#workloads").row_count)
        table = app.screen.query_one("#workloads", DataTable)
        rows = [(str(table.get_row_at(i)[1]), str(table.get_row_at(i)[0])) for i in range(table.row_count)]
        assert rows == sorted(rows, key=lambda r: (r[0].lower(), r[1].lower())), rows
        assert ("sample_workloads", "tiny_cpu.yaml") in rows


async def test_d_asks_record_only_or_files_too_and_files_too_removes_the_folder_here(home):
    from launcher.runs.core.store import RunStore
    from tui.screens.delete_run import DeleteRunModal

    for run_id in ("run-keepfiles", "run-gofiles"):
        _record_run(home, run_id, {0: ["x"], 1: ["y"]}, [], RunState.SUCCEEDED)
        (home / "nodes" / run_id / "node-0").mkdir(parents=True)
        (home / "nodes" / run_id / "node-0" / "weights.bin").write_bytes(b"\0" * 4096)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.screen.query("#runs") and app.screen.runs_table.row_count == 2)
        home_screen = app.screen
        home_screen.query_one("#runs").focus()
        for run_id, key in (("run-keepfiles", "r"), ("run-gofiles", "f")):
            table = home_screen.runs_table
            table.move_cursor(row=[table.coordinate_to_cell_key((i, 0)).row_key.value
                                   for i in range(table.row_count)].index(run_id))
            await pilot.press("d")
            await wait_for(pilot, lambda: isinstance(app.screen, DeleteRunModal))
            question = str(app.screen.query_one(".question").render())
            assert f"here: {home / 'nodes' / run_id} (4.0 KiB" in question and "fsdp-tui rm --files" in question
            await pilot.press(key)
            await wait_for(pilot, lambda r=run_id: RunStore(home).get_run(r) is None, timeout=60)
        assert (home / "nodes" / "run-keepfiles").is_dir()  # record only: its files stay
        assert not (home / "nodes" / "run-gofiles").exists()


async def test_g_on_a_machine_without_gpus_says_so_in_words(home, monkeypatch):
    import os
    import shutil

    from launcher.runs.launch import create_run
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text
    from tui.screens.gpus import GpusScreen

    if shutil.which("nvidia-smi"):
        monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                                  if not (Path(p) / "nvidia-smi").exists()))
    plan = build_plan(validate_text("experiment_name: g\ncommand: x\n", "w.yaml").workload, run_id="run-cpu",
                      node_root=str(home / "nodes"))
    create_run(plan, home)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await app.push_screen(GpusScreen("run-cpu"))
        await wait_for(pilot, lambda: "no GPU to look at" in str(app.screen.query_one("#gpus-said").render()),
                       timeout=60)
        said = str(app.screen.query_one("#gpus-said").render())
        assert "Errno" not in said and "nvidia-smi is not on this node" in said


async def test_p_picks_a_rank_of_the_pane_and_shows_its_own_lines_from_the_node(home):
    from textual.widgets import Label

    from launcher.runs.core.store import RunStore
    from launcher.runs.launch import create_run
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text
    from tui.screens.rank_log import RankLogModal
    from tui.screens.rank_picker import RankPickerModal

    text = "experiment_name: r\ncompute: {accelerator_type: CPU, procs_per_node: 2}\ncommand: x\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id="run-ranks", node_root=str(home / "nodes"))
    directory = create_run(plan, home)
    (directory / "nodes" / "0.log").write_text("hello from rank 0\nhello from rank 1\n")
    RunStore(home).set_state("run-ranks", RunState.RUNNING, 1)
    RunStore(home).set_state("run-ranks", RunState.SUCCEEDED, 1)
    _write(Path(plan.nodes[0].node_dir) / "rank-1.log", "hello from rank 1\nrank 1's own warning\n")  # as the agent keeps it
    app = FsdpTuiApp(home, run_id="run-ranks")
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen) and app.screen.pane(0).line_count == 2)
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, RankPickerModal))
        assert app.screen.ranks == [0, 1]
        title = app.screen.query_one(Label)  # every word shown (it wraps in the box; it was cut at its edge)
        drawn = " ".join("".join(s.text for s in strip).strip() for strip in title.render_lines(title.size.region))
        assert " ".join(drawn.split()) == "The ranks of node 0: enter shows the one picked, alone (its own lines)"
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, RankLogModal) and app.screen.lines_shown == 2, timeout=60)
        view = app.screen.query_one("#rank-lines")
        assert list(view.lines) == ["hello from rank 1", "rank 1's own warning"]
        assert "rank 1 on node 0 (this machine): 2 lines (the run has ended" in str(
            app.screen.query_one("#rank-title").render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen))


async def test_one_evaluation_is_a_figure_not_a_full_width_bar(home):
    """A sparkline of one value draws a solid bar the whole box wide, which reads as a flat, high curve: with
    one evaluation the box says the figure and that the line starts at the second."""
    from textual.widgets import Sparkline

    from launcher.events import MetricsRecorded
    from tests.tui.support import FedEvents
    from trainer.wire.protocol import MetricRecord

    run = FedEvents([MetricsRecorded("r", MetricRecord(step=25, kind="eval", eval_loss=2.5))])
    app = FsdpTuiApp(home)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = RunMonitorScreen("r", 1, events=run)
        await app.push_screen(screen)
        box = screen.query_one("#spark-eval")
        await wait_for(pilot, lambda: box.shown == (2.5,))
        title = str(box.query_one(".title").render())
        assert "eval loss  2.5000  (one so far: the line starts at the second)" in title
        assert box.query_one(Sparkline).has_class("-empty")
        run.put(MetricsRecorded("r", MetricRecord(step=50, kind="eval", eval_loss=2.25)))
        await wait_for(pilot, lambda: box.shown == (2.5, 2.25))
        assert not box.query_one(Sparkline).has_class("-empty")
        assert "last 2.2500  min 2.2500" in str(box.query_one(".title").render())


async def test_the_cpu_template_f8_on_each_blank_and_model_completion(home, tmp_path):
    """The CPU variant of the SSH template, filled from the keyboard: f8 goes to the next blank and selects
    it (typing replaces it, never types beside it); ctrl+space after ``model_name:`` offers the built-in
    models, the hub names of the docs and the model folders here; the file then validates."""
    from tui.screens.templates import TemplateModal
    from tui.widgets.completion import CompletionMenu, WorkloadArea

    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text("{}")
    app = FsdpTuiApp(home, workload=tmp_path / "new.yaml")
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TemplateModal))
        titles = [t.title for t in app.screen.templates]
        await pilot.press(*["down"] * titles.index("N SSH hosts, built-in trainer, CPU"), "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        editor = app.screen
        area = editor.query_one(WorkloadArea)
        assert area.selected_text == "<host-0>"
        await pilot.press(*"nc1")
        await wait_for(pilot, lambda: editor.shown_version == editor.version and len(editor.problems) == 1)
        area.cursor_location = (0, 0)
        await pilot.press("f8")
        assert area.selected_text == "<host-1>"
        await pilot.press(*"nc2")
        lines = area.text.split("\n")
        assert "    - nc1" in lines and "    - nc2" in lines and "<host" not in area.text
        row = next(i for i, line in enumerate(lines) if line.startswith("  model_name:"))
        area.cursor_location = (row, len("  model_name: "))
        area.replace("", (row, len("  model_name: ")), (row, len(lines[row])))  # the value gone: what fits here?
        await pilot.press("ctrl+space")
        menu = editor.query_one(CompletionMenu)
        await wait_for(pilot, lambda: menu.is_open)
        offered = [item.label for item in menu.completions.items]
        assert offered[:2] == ["builtin:tiny-llama", "builtin:small-llama"]
        assert "meta-llama/Llama-3.2-1B" in offered and "./my-model" in offered
        await pilot.press("enter")
        assert area.document.get_line(row) == "  model_name: builtin:tiny-llama"
        await wait_for(pilot, lambda: editor.shown_version == editor.version and not editor.problems)
