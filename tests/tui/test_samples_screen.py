"""The samples screen under Pilot: ``a`` in the monitor opens each prompt with its answer per step, steps
written while it is open are read in, a node's escape sequences never reach the screen, and two
checkpoints' answers stand side by side."""

from __future__ import annotations

import json

from textual.widgets import Label, Log

from launcher.events import RunState
from tests.tui.support import RecordedRun, record
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen
from tui.screens.samples import SamplesScreen


def _line(step: int, answer: str) -> str:
    return json.dumps({"step": step, "samples": [
        {"prompt": "Add the two numbers.", "answer": answer},
        {"prompt": "Reverse: abc", "answer": answer.upper(), "reference": "cba"}]}) + "\n"


async def _until(pilot, predicate) -> None:
    for _ in range(300):
        if predicate():
            return
        await pilot.pause(0.1)
    raise AssertionError("condition not reached in time")


async def test_a_opens_each_prompt_with_its_answer_per_step_and_reads_new_steps(home):
    run = RecordedRun("run-samples", "lora", RunState.SUCCEEDED, 1, 0, 60, 1.0, None, 8, 8)
    directory = record(home, run)
    (directory / "samples.jsonl").write_text(_line(0, "\x1b]0;owned\x07zzz") + _line(4, "cab"))
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        app.push_screen(RunMonitorScreen("run-samples", 1))
        await pilot.pause()
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, SamplesScreen)
        log = app.screen.query_one(Log)
        await _until(pilot, lambda: log.line_count >= 7)
        lines = list(log.lines)
        assert lines[:3] == ["prompt 1: Add the two numbers.", "      step 0  zzz", "      step 4  cab"]
        assert lines[3:7] == ["prompt 2: Reverse: abc", "        data  cba", "      step 0  ZZZ", "      step 4  CAB"]
        assert "answers at steps 0, 4" in str(app.screen.query_one("#samples-said", Label).render())
        assert not any("\x1b" in line for line in lines)
        path = directory / "samples.jsonl"  # the run goes on: a new step is read in
        path.write_text(path.read_text() + _line(8, "abc"))
        await _until(pilot, lambda: "      step 8  abc" in list(log.lines))
        await pilot.press("escape")
        assert isinstance(app.screen, RunMonitorScreen)


async def test_two_checkpoints_answers_side_by_side(home):
    run = RecordedRun("run-versus", "lora", RunState.SUCCEEDED, 1, 0, 60, 1.0, None, 8, 8)
    directory = record(home, run)
    (directory / "samples.jsonl").write_text(_line(0, "zzz") + _line(4, "cab") + _line(8, "cab"))
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        app.push_screen(SamplesScreen("run-versus", (5, 8)))  # step 5 was not sampled: its answers are step 4's
        await pilot.pause()
        log = app.screen.query_one(Log)
        await _until(pilot, lambda: log.line_count >= 6)
        lines = [line.rstrip() for line in log.lines]
        assert lines[0].startswith("step 5") and "step 8" in lines[0]
        assert lines[1] == "prompt 1: Add the two numbers."
        assert lines[2].split() == ["cab", "=", "cab"]
        assert "checkpoint 5: step 4" in str(app.screen.query_one("#samples-said", Label).render())


async def test_the_checkpoints_screen_shows_adapter_checkpoints_and_two_steps_answers_side_by_side(home, tmp_path):
    from textual.widgets import DataTable

    from launcher.runs.core.store import RunStore
    from launcher.runs.launch import create_run
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text
    from tui.screens.checkpoints import CheckpointsScreen

    out = tmp_path / "out"
    text = f"experiment_name: ck\ncommand: x\nparameters: {{output_dir: '{out}'}}\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id="run-lora", node_root=str(home / "nodes"))
    directory = create_run(plan, home)
    RunStore(home).set_state("run-lora", RunState.SUCCEEDED, 1)
    (directory / "samples.jsonl").write_text(_line(0, "zzz") + _line(10, "cab") + _line(20, "5"))
    for step in (10, 20):
        d = out / "checkpoints" / f"step-{step:08d}"
        d.mkdir(parents=True)
        (d / "__0_0.distcp").write_bytes(b"x" * 3 * 2**20)
        (d / ".metadata").write_bytes(b"m")
        (d / "meta.json").write_text(json.dumps({"step": step, "run_id": "run-lora", "lora": {"r": 8}}))
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        app.push_screen(CheckpointsScreen("run-lora"))
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        await _until(pilot, lambda: table.row_count == 2)  # listed by the node's agent
        assert [[str(c) for c in table.get_row_at(i)][:4] for i in range(2)] == [
            ["10", "yes", "adapter", "3.0 MiB"], ["20", "yes", "adapter", "3.0 MiB"]]
        table.move_cursor(row=0)
        await pilot.press("v")
        await pilot.pause()
        table.move_cursor(row=1)
        await pilot.press("v")
        await pilot.pause()
        assert isinstance(app.screen, SamplesScreen) and app.screen.steps == (10, 20)
        log = app.screen.query_one(Log)
        await _until(pilot, lambda: log.line_count >= 3)
        assert list(log.lines)[2].split() == ["cab", "|", "5"]
