"""The monitor's safe-step line after the run ends: asked once more then (the run's last saves, a cancel's
checkpoint), never left at what the last poll during the run said."""

from __future__ import annotations

import json

from launcher.events import RunFinished, RunState, RunStateChanged
from launcher.runs.core.layout import EVENTS, event_line
from launcher.runs.core.store import RunStore
from launcher.runs.launch import create_run
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from tests.tui.support import _owned_elsewhere, wait_for
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen


def _summary(app) -> str:
    return " ".join(str(label.render()) for label in app.screen.query("#summary"))


async def test_the_safe_step_line_is_asked_again_when_the_run_ends(home, tmp_path):
    out = tmp_path / "out"
    text = f"experiment_name: ck\ncommand: x\nparameters: {{output_dir: '{out}'}}\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id="run-end", node_root=str(home / "nodes"))
    directory = create_run(plan, home)
    store = RunStore(home)
    store.set_state("run-end", RunState.RUNNING, 1)
    _owned_elsewhere(directory)  # an owner lives elsewhere: nobody adopts the recorded run
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await app.push_screen(RunMonitorScreen("run-end", 1))
        await wait_for(pilot, lambda: "safe no complete checkpoint of its own yet" in _summary(app), timeout=30)
        step = out / "checkpoints" / "step-00000100"  # the run's last save, made whole as it ended
        step.mkdir(parents=True)
        (step / "__0_0.distcp").write_bytes(b"x" * 100)
        (step / ".metadata").write_bytes(b"m")
        (step / "meta.json").write_text(json.dumps({"step": 100, "run_id": "run-end", "shards": {"__0_0.distcp": {"bytes": 100,
                                                                                             "node": 0}}}))
        store.set_state("run-end", RunState.CANCELLED, 1)
        ended = [RunStateChanged("run-end", RunState.CANCELLED, 1, ""), RunFinished("run-end", RunState.CANCELLED,
                                                                                   None, None)]
        events = directory / EVENTS
        events.write_text(events.read_text() + "".join(event_line(e) + "\n" for e in ended))
        await wait_for(pilot, lambda: "safe step 100 (step-00000100, written" in _summary(app), timeout=30)
