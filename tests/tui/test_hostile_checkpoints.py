"""The checkpoints screen over a node's hostile checkpoint folders (listed by the real agent on this
machine): names show printable, a link to ``/`` shows as a link and cannot be resumed from, and resuming
from a folder named with ``#`` and ``: `` asks for exactly that folder, as data."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import DataTable

from launcher.events import RunState
from tests.support.hostile import reached_terminal_safely
from tests.tui.support import wait_for
from tui.app import FsdpTuiApp


def _complete(root: Path, name: str, step: int) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / ".metadata").write_bytes(b"m")
    (d / "meta.json").write_text(json.dumps({"step": step}))


async def test_hostile_checkpoint_names_links_and_resume_as_data(home, tmp_path, monkeypatch):
    from launcher.runs.core.store import RunStore
    from launcher.runs.launch import create_run
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text
    from tui.screens.checkpoints import CheckpointsScreen

    out = home / "nodes" / "run-ck" / "node-0" / "out"  # a relative output_dir: the run's own folder
    text = "experiment_name: ck\ncommand: x\nparameters: {output_dir: out}\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id="run-ck", node_root=str(home / "nodes"))
    create_run(plan, home)
    RunStore(home).set_state("run-ck", RunState.SUCCEEDED, 1)
    root = out / "checkpoints"
    _complete(root, "step-00000009-\x1b]2;PWNED\x07x", 9)
    _complete(root, "step-00000011-a #b: c", 11)
    (root / "step-00000006").symlink_to("/")
    asked: list = []
    app = FsdpTuiApp(home)
    monkeypatch.setattr(app, "resume_run", lambda run_id, name: asked.append((run_id, name)))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        app.push_screen(CheckpointsScreen("run-ck"))
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 3)
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(3)]
        assert [(r[0], r[1], r[2], r[5]) for r in rows] == [
            ("6", "link", "full", "step-00000006"), ("9", "yes", "full", "step-00000009-x"),
            ("11", "yes", "full", "step-00000011-a #b: c")]
        assert all(reached_terminal_safely(cell) for r in rows for cell in r)
        table.move_cursor(row=0)
        await pilot.press("r")
        table.move_cursor(row=2)
        await pilot.press("r")
        await pilot.pause()
    assert asked == [("run-ck", "step-00000011-a #b: c")]  # the folder picked, by its name
    from launcher.runs.launch import resume_plan

    resumed = await resume_plan(home, "run-ck", name="step-00000011-a #b: c")
    assert resumed.path == str(root / "step-00000011-a #b: c") and resumed.bring is None  # this machine holds it
    assert resumed.planned.plan.workload.parameters["checkpoint"]["resume"] == resumed.path  # data, never YAML
