"""The real app under Pilot: editor problems and jumps, home lists, run monitor on real and recorded runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from textual.widgets import DataTable, TextArea

from launcher.events import NodeState, RunState
from launcher.workload.cursor import key_path_at
from tests.support.cli import ROOT
from tui.app import FsdpTuiApp
from tui.screens.editor import EditorScreen
from tui.screens.home import HomeScreen
from tui.screens.monitor import RunMonitorScreen
from tui.widgets.problems import ProblemsList


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("FSDP_TUI_HOME", str(h))
    monkeypatch.setenv("FSDP_TUI_ASSETS", "/tmp/fsdp-tui-test-assets")
    return h


async def _wait_for(pilot, predicate, timeout=30.0):
    import asyncio

    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, "condition not reached in time"
        await pilot.pause(0.1)


async def test_editor_shows_problems_and_jumps_to_them(home, tmp_path):
    bad = tmp_path / "bad.yaml"
    shutil.copy(ROOT / "tests/data/malformed/26_trainer_bad_enum.yaml", bad)
    app = FsdpTuiApp(home, workload=bad)
    async with app.run_test(size=(140, 40)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, EditorScreen) and app.screen.problems)
        table = app.screen.query_one(ProblemsList)
        assert table.option_count == 1
        assert "did you mean 'full_shard'" in str(table.get_option_at_index(0).prompt)
        table.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.query_one(TextArea).cursor_location == (6, 14)
        # Fix it in the buffer: the problem goes away after the debounce.
        area = app.screen.query_one(TextArea)
        area.text = area.text.replace("full_shrad", "full_shard")
        await _wait_for(pilot, lambda: not any(p.is_error for p in app.screen.problems))
        assert [p.path for p in app.screen.problems] == ["compute"]  # only the no-compute warning is left
        assert "valid" in str(app.screen.query_one("#status").render())


def test_key_path_at_follows_indentation():
    text = "experiment_name: x\nparameters:\n  fsdp:\n    sharding: full_shard\n  max_steps: 3\n"
    assert key_path_at(text, 3) == ("parameters", "fsdp", "sharding")
    assert key_path_at(text, 4) == ("parameters", "max_steps")
    assert key_path_at(text, 0) == ("experiment_name",)


async def test_home_lists_samples_and_opens_the_editor(home):
    app = FsdpTuiApp(home)
    async with app.run_test(size=(120, 40)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
        table = app.screen.query_one("#workloads", DataTable)
        names = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert "tiny_cpu.yaml" in names
        table.focus()
        table.move_cursor(row=names.index("tiny_cpu.yaml"))
        await pilot.press("enter")
        await _wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        assert app.screen.path.name == "tiny_cpu.yaml"


def _record_run(home: Path, run_id: str, lines: dict[int, list[str]], records: list[dict], state: RunState) -> None:
    """A finished run's local record, as the launcher writes it."""
    from launcher.runs.core.store import RunStore
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    text = "experiment_name: recorded\ncompute: {num_accelerators: 2, gpus_per_node: 1, hosts: [a, b]}\ncommand: x\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id=run_id)
    store = RunStore(home)
    directory = store.create_run(plan, None, text)
    for rank, node_lines in lines.items():
        (directory / "nodes" / f"{rank}.log").write_text("\n".join(node_lines) + "\n")
        store.set_node(run_id, rank, NodeState.EXITED, 0 if rank == 0 else 1)
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    store.set_state(run_id, RunState.RUNNING, 1)
    store.set_state(run_id, state, 1)


async def test_monitor_replays_a_recorded_two_node_run(home):
    records = [{"step": s, "kind": "train", "max_steps": 4, "loss": 4.0 - s, "tokens_per_s": 100.0,
                "memory": [{"rank": 0, "peak_gib": 70.0, "total_gib": 80.0},
                           {"rank": 1, "peak_gib": 78.0, "total_gib": 80.0}]} for s in range(1, 5)]
    _record_run(home, "run-rec", {0: [f"step={i}" for i in range(50)],
                                  1: ["start", "[rank1]: RuntimeError: NCCL error", "more"]}, records,
                RunState.FAILED)
    app = FsdpTuiApp(home, run_id="run-rec")
    async with app.run_test(size=(160, 50)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen)
                        and app.screen.view.state == RunState.FAILED and app.screen.view.step == 4)
        screen = app.screen
        await _wait_for(pilot, lambda: screen.pane(0).line_count == 50 and screen.pane(1).line_count == 3)
        assert "!! [rank1]: RuntimeError" in screen.pane(1).lines[1]
        assert screen.pane(1).has_class("-failed")
        await _wait_for(pilot, lambda: len(screen.query("MemoryGauge")) == 2)
        gauges = {g.rank: g for g in screen.query("MemoryGauge")}
        await _wait_for(pilot, lambda: gauges[1].has_class("-crit") and gauges[0].has_class("-warn"))
        await _wait_for(pilot, lambda: "last 0.0000" in str(screen.query_one("#spark-loss").query_one(".title").render()))
        assert screen.view.first_error() == (1, 1, "[rank1]: RuntimeError: NCCL error")
        await pilot.press("e")
        assert screen.follow is False
        await pilot.press("m")
        assert screen.views.merged and screen.query_one("#merged").display and not screen.query_one("#logs").display
        await _wait_for(pilot, lambda: screen.pane(-1).line_count == 53)
        await pilot.press("m", "slash", *"NCCL", "enter")
        await _wait_for(pilot, lambda: screen.pane(1).line_count == 1 and screen.pane(0).line_count == 0)


@pytest.mark.parametrize("size, scrolls", [((80, 24), True), ((250, 70), False)])
async def test_eight_node_panes_stay_readable_at_80x24_and_all_show_at_250x70(home, size, scrolls):
    from tests.tui.support import RecordedRun, record
    from tui.screens.monitor import PANE_MIN_ROWS

    run = RecordedRun("20260301-0900-big-a1f3", "big", RunState.SUCCEEDED, 8, 0, 100, 1.0, 1.0, 8, 8)
    record(home, run, node_lines={r: [f"node {r} line {i}" for i in range(40)] for r in range(8)})
    app = FsdpTuiApp(home, run_id=run.run_id)
    async with app.run_test(size=size) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen)
                        and app.screen.pane(7).line_count == 40)
        screen = app.screen
        grid = screen.query_one("#logs")
        await _wait_for(pilot, lambda: (grid.max_scroll_y > 0) == scrolls)
        heights = [screen.pane(r).size.height for r in range(8)]
        assert min(heights) >= PANE_MIN_ROWS - 2, heights  # inside the border (its title the badge): 7 lines
        assert screen.query_one("MetricsPanel").has_class("-short") == (size[1] < 32)
        if scrolls:
            screen.pane(7).focus()  # moving to a pane off screen scrolls the grid to it
            await _wait_for(pilot, lambda: grid.scroll_y > 0)


async def test_monitor_on_a_real_local_run_then_cancel(home, tmp_path):
    wl = tmp_path / "w.yaml"
    wl.write_text("experiment_name: live\ncommand: |\n  for i in $(seq 1 600); do echo \"step=$i/600 loss=$((600 - i))\"; "
                  "sleep 0.05; done\n")
    app = FsdpTuiApp(home, workload=wl, launch=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen) and app.screen.view.step >= 5)
        screen = app.screen
        await _wait_for(pilot, lambda: screen.pane(0).line_count >= 5)
        assert len(screen.view.loss) >= 5
        await pilot.press("c")
        await pilot.press("y")
        await _wait_for(pilot, lambda: screen.view.state == RunState.CANCELLED, timeout=30)
    from tests.support.cli import tagged

    assert tagged(screen.run_id) == []


async def test_themes_switch_and_persist(home):
    from tui import settings

    app = FsdpTuiApp(home, theme="fsdp-light")
    async with app.run_test() as pilot:
        assert app.theme == "fsdp-light"
        seen = []
        for _ in range(4):
            await pilot.press("t")
            seen.append(app.theme)
        assert seen == ["fsdp-dark", "fsdp-gruvbox", "fsdp-light", "fsdp-dark"]  # t cycles fsdp-tui's own
        chosen = app.theme
    assert settings.load()["theme"] == chosen
    for name in ("fsdp-dark", "fsdp-light", "fsdp-gruvbox", "textual-dark"):
        app = FsdpTuiApp(home, theme=name)
        async with app.run_test() as pilot:
            await pilot.pause()
            assert app.theme == name


async def test_bad_user_theme_is_skipped_with_a_notice(home):
    (home / "themes").mkdir(parents=True)
    (home / "themes" / "broken.toml").write_text("name = 'broken'\nprimary = 'not-a-colour\n")
    app = FsdpTuiApp(home)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.theme == "fsdp-dark"
        assert any("broken.toml" in str(n.message) for n in app._notifications)


def _fake_checkpoints(root: Path, steps: dict[int, bool], run_id: str = "run-ck") -> None:
    for step, complete in steps.items():
        d = root / f"step-{step:08d}"
        d.mkdir(parents=True)
        (d / "__0_0.distcp").write_bytes(b"x" * 1000)
        (d / "meta.json").write_text(json.dumps({"step": step, "run_id": run_id}))
        if complete:  # DCP's .metadata: an interrupted save never wrote it
            (d / ".metadata").write_bytes(b"m")


async def test_checkpoints_browser_lists_and_never_deletes_the_newest_complete(home, tmp_path):
    from launcher.runs.core.store import RunStore
    from launcher.runs.launch import create_run
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text
    from tui.screens.checkpoints import CheckpointsScreen

    out = tmp_path / "out"
    text = f"experiment_name: ck\ncommand: x\nparameters: {{output_dir: '{out}'}}\n"
    plan = build_plan(validate_text(text, "w.yaml").workload, run_id="run-ck", node_root=str(home / "nodes"))
    create_run(plan, home)
    RunStore(home).set_state("run-ck", RunState.SUCCEEDED, 1)
    _fake_checkpoints(out / "checkpoints", {10: True, 20: True, 30: False})
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        app.push_screen(CheckpointsScreen("run-ck"))
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        await _wait_for(pilot, lambda: table.row_count == 3)  # listed by the node's agent
        assert [(str(table.get_row_at(i)[0]), str(table.get_row_at(i)[1])) for i in range(3)] == [
            ("10", "yes"), ("20", "yes"), ("30", "NO")]
        table.move_cursor(row=1)
        await pilot.press("d")
        await pilot.pause()
        assert (out / "checkpoints" / "step-00000020").exists()
        table.move_cursor(row=0)
        await pilot.press("d")
        await pilot.pause()
        await pilot.press("y")
        await _wait_for(pilot, lambda: app.screen.query_one(DataTable).row_count == 2)
        assert not (out / "checkpoints" / "step-00000010").exists()
        app.push_screen(RunMonitorScreen("run-ck", 1))  # its summary line says the last safe step
        await _wait_for(pilot, lambda: any("safe step 20 (step-00000020, written " in str(label.render())
                                           for label in app.screen.query("#summary")))


async def test_compare_two_runs_shows_numbers_and_config_diff(home):
    from tui.screens.sweep import SweepScreen
    from tui.widgets.comparison_table import ComparisonTable

    _record_run(home, "run-a", {0: ["a"], 1: ["a"]}, [{"step": 1, "loss": 2.0}], RunState.SUCCEEDED)
    _record_run(home, "run-b", {0: ["b"], 1: ["b"]}, [{"step": 1, "loss": 1.0}], RunState.FAILED)
    (home / "runs" / "run-b" / "workload.yaml").write_text(
        (home / "runs" / "run-b" / "workload.yaml").read_text().replace("command: x", "command: y"))
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        app.push_screen(SweepScreen(run_ids=["run-b", "run-a"]))  # marked in the other order: shown as launched
        await _wait_for(pilot, lambda: app.screen.loaded >= 1)
        assert app.screen.query_one(ComparisonTable).row_count == 2
        assert [(r.label, r.state, r.final_loss) for r in app.screen.rows] == [
            ("command=x", "succeeded", 2.0), ("command=y", "failed", 1.0)]
        diff = app.screen.diff_text
        assert "-command: x" in diff and "+command: y" in diff


def _grow_to_1gib(log: Path) -> None:
    with open(log, "r+b") as f:
        f.truncate(1 << 30)  # 1 GiB (sparse), then the lines a user wants to see
        f.seek(0, 2)
        f.write(b"".join(b"tail line %d\n" % i for i in range(100)))


async def test_finished_run_with_a_1gb_log_opens_at_once(home):
    _record_run(home, "run-big", {0: ["x"], 1: ["y"]}, [], RunState.SUCCEEDED)
    log = home / "runs" / "run-big" / "nodes" / "0.log"
    _grow_to_1gib(log)
    app = FsdpTuiApp(home, run_id="run-big")
    async with app.run_test(size=(140, 40)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen)
                        and app.screen.pane(0).line_count > 0, timeout=30)
        await _wait_for(pilot, lambda: "tail line 99" in app.screen.pane(0).lines[-1], timeout=30)
        assert "earlier bytes are in" in app.screen.pane(0).lines[0]  # the tail only, not the gigabyte


async def test_e_jumps_to_the_error_of_the_last_attempt(home):
    marker = "=== fsdp-tui: attempt {} of 2, started 2026-03-01 09:00:00 UTC ==="
    lines = [marker.format(1), "RuntimeError: the first attempt's failure", marker.format(2), "step 1",
             "ValueError: the second attempt's own failure"]
    _record_run(home, "run-retried", {0: lines, 1: ["ok"]}, [], RunState.FAILED)
    app = FsdpTuiApp(home, run_id="run-retried")
    async with app.run_test(size=(140, 40)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen)
                        and app.screen.pane(0).line_count == 5)
        await pilot.press("e")
        await pilot.pause()
        said = [str(n.message) for n in app._notifications]
        assert any("node 0, line 5" in m and "second attempt" in m for m in said), said


async def test_an_unknown_theme_asked_for_keeps_the_saved_one(home):
    from tui import settings

    app = FsdpTuiApp(home, theme="fsdp-gruvbox")
    async with app.run_test() as pilot:
        await pilot.pause()
    app = FsdpTuiApp(home, theme="bogus")
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.theme == "fsdp-gruvbox"
        assert any("unknown theme 'bogus'" in str(n.message) for n in app._notifications)
    assert settings.load()["theme"] == "fsdp-gruvbox"


async def test_the_command_palette_finds_runs_workloads_and_themes(home):
    from textual.command import CommandPalette

    _record_run(home, "20260301-0900-llama-a1f3", {0: ["a"], 1: ["b"]}, [], RunState.SUCCEEDED)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+p")
        await _wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"open run a1f3")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await _wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen))
        assert app.screen.run_id == "20260301-0900-llama-a1f3"
        app.pop_screen()
        await pilot.press("ctrl+p")
        await _wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"theme fsdp-gruvbox")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await _wait_for(pilot, lambda: app.theme == "fsdp-gruvbox")
        await pilot.press("ctrl+p")
        await _wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"edit tiny_cpu")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await _wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        assert app.screen.path.name == "tiny_cpu.yaml"


async def test_the_monitor_filter_applies_as_you_type_and_escape_clears_it(home):
    _record_run(home, "run-filter", {0: ["alpha one", "beta two", "alpha three"], 1: ["gamma"]}, [],
                RunState.SUCCEEDED)
    app = FsdpTuiApp(home, run_id="run-filter")
    async with app.run_test(size=(140, 40)) as pilot:
        await _wait_for(pilot, lambda: isinstance(app.screen, RunMonitorScreen)
                        and app.screen.pane(0).line_count == 3)
        screen = app.screen
        await pilot.press("slash", *"alpha")
        await _wait_for(pilot, lambda: screen.pane(0).line_count == 2 and screen.pane(1).line_count == 0)
        await pilot.press("escape")
        await _wait_for(pilot, lambda: screen.pane(0).line_count == 3)
        assert app.screen is screen and not screen.has_class("-filtering")


def _tagged_sleep(run_id: str):
    """A process that carries a run's tag, as a leftover of that run would."""
    import os
    import subprocess

    return subprocess.Popen(["sleep", "120"], env={**os.environ, "FSDP_TUI_RUN_ID": run_id})


async def test_gpus_screen_lists_a_leftover_and_x_stops_it(home, tmp_path, monkeypatch):
    """No GPU here: a stand-in nvidia-smi prints recorded output naming a real process tagged with an ended run."""
    import os

    from launcher.runs.core.store import RunStore
    from launcher.runs.launch import create_run
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text
    from tui.screens.gpus import GpusScreen

    plan = build_plan(validate_text("experiment_name: g\ncommand: x\n", "w.yaml").workload, run_id="run-g",
                      node_root=str(home / "nodes"))
    create_run(plan, home)
    RunStore(home).set_state("run-g", RunState.CANCELLED, 1)
    leftover = _tagged_sleep("run-g")
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\ncase \"$1\" in\n  --query-gpu=*) echo '0, GPU-1, NVIDIA H100, 61234, 81559' ;;\n"
                   f"  *) echo 'GPU-1, {leftover.pid}, python3, 61000' ;;\nesac\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    try:
        app = FsdpTuiApp(home)
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause()
            app.push_screen(GpusScreen("run-g"))
            await _wait_for(pilot, lambda: any(t.row_count == 1 for t in app.screen.query(DataTable)))
            row = [str(c) for c in app.screen.query_one(DataTable).get_row_at(0)]
            assert row[1:4] == ["0", str(leftover.pid), "61000 MiB"] and "cancelled: a leftover, x stops it" in row[5]
            await pilot.press("x")
            await _wait_for(pilot, lambda: f"stopped {leftover.pid}" in str(app.screen.query_one("#gpus-said").render()))
        assert leftover.wait(timeout=30) is not None
    finally:
        leftover.kill()
