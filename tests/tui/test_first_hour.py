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
