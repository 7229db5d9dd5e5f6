"""SVG snapshots of the real app at 120x36: the editor on a broken workload, the monitor of a recorded
2-node run, the runs browser, and every built-in theme. Data and times are fixed; nothing runs for real.

After an intended change of the screens: ``pytest tests/tui/screens/test_snapshots.py --snapshot-update``, then look
at the new SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.events import RunState
from tests.support.tui import T0, RecordedRun, record, record_all, wait_for
from themes import discover
from tui.app import FsdpTuiApp
from tui.screens.editor import EditorScreen
from tui.screens.home import HomeScreen
from tui.screens.monitor import RunMonitorScreen
from tui.widgets.completion import CompletionMenu, WorkloadArea
from tui.widgets.problems import ProblemsList

SIZE = (120, 36)

BROKEN_WORKLOAD = """\
experiment_name: llama-sft
compute:
  num_accelerators: 2
  gpus_per_node: 1
  hosts: [gpu-a, gpu-b]
parameters:
  model_name: meta-llama/Llama-3.2-1B
  dataset_name: squad
  output_dir: /tmp/out
  max_steps: twenty
  learning_rat: 2.0e-5
  fsdp:
    sharding: full_shrad
"""
"""Three errors: a word for a number, a misspelt key and a misspelt choice (both with did-you-mean)."""

BUILTIN_THEMES = sorted(spec.name for spec in discover(None)[0])


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty current folder: the home screen lists only the shipped samples, by relative folder."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_editor_with_problems(snap_compare, home, workdir):
    (workdir / "llama-sft.yaml").write_text(BROKEN_WORKLOAD)
    app = FsdpTuiApp(home, workload=Path("llama-sft.yaml"))

    async def ready(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen) and len(app.screen.problems) == 3)
        # The problems list has the focus: the text's blinking cursor would be on or off at random.
        app.screen.query_one(ProblemsList).focus()
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


EDITOR_SIZES = [(80, 24), (160, 48)]


@pytest.mark.parametrize("size", EDITOR_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_editor_completion_open(snap_compare, home, workdir, size):
    (workdir / "demo.yaml").write_text("experiment_name: demo\ncompute:\n  accelerator_type: CPU\n\ncommand: x\n")
    app = FsdpTuiApp(home, workload=Path("demo.yaml"))

    async def ready(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen) and app.screen.shown_version)
        area = app.screen.query_one(WorkloadArea)
        area.cursor_blink = False
        area.cursor_location = (3, 0)
        await pilot.press("space", "space", "p")
        await wait_for(pilot, lambda: app.screen.query_one(CompletionMenu).is_open)
        await wait_for(pilot, lambda: app.screen.shown_version == app.screen.version)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", EDITOR_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_editor_teaching_problem(snap_compare, home, workdir, size):
    (workdir / "demo.yaml").write_text("experiment_name: demo\ncompute:\n  hots: [gpu-a]\n")
    app = FsdpTuiApp(home, workload=Path("demo.yaml"))

    async def ready(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen) and len(app.screen.problems) == 2)
        app.screen.query_one(ProblemsList).focus()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=ready)


def _record_two_node_run(home: Path) -> str:
    run = RecordedRun("20260301-0900-llama-sft-a1f3", "llama-sft", RunState.FAILED, 2, 0, 3723, 1.6, 1.9, 8, 8)
    metrics = [{"step": s, "kind": "train", "max_steps": 8, "loss": round(3.0 - 0.2 * s, 2), "lr": 2e-5 * s / 8,
                "tokens_per_s": 4000.0 + 100 * s, "time": T0 + s,
                "memory": [{"rank": 0, "peak_gib": 60.0 + s, "total_gib": 80.0},
                           {"rank": 1, "peak_gib": 70.0 + s, "total_gib": 80.0}]} for s in range(1, 9)]
    metrics += [{"step": 4, "kind": "eval", "eval_loss": 2.1}, {"step": 8, "kind": "eval", "eval_loss": 1.9}]
    node_lines = {
        0: [f"step={s}/8 loss={3.0 - 0.2 * s:.2f} tokens/s={4000 + 100 * s}" for s in range(1, 9)]
        + ["saving checkpoint step-00000008", "waiting for rank 1"],
        1: [f"step={s}/8 loss={3.0 - 0.2 * s:.2f}" for s in range(1, 9)]
        + ["[rank1]: RuntimeError: NCCL error: unhandled system error", "exiting with code 1"],
    }
    record(home, run, node_lines=node_lines, metrics=metrics)
    return run.run_id


def test_monitor_of_a_recorded_two_node_run(snap_compare, home, workdir):
    run_id = _record_two_node_run(home)
    app = FsdpTuiApp(home, run_id=run_id)

    async def ready(pilot) -> None:
        def done() -> bool:
            screen = app.screen
            return (isinstance(screen, RunMonitorScreen) and screen.view.state == RunState.FAILED
                    and screen.pane(0).line_count == 10 and screen.pane(1).line_count == 10
                    and "elapsed 1:02:03" in str(screen.query_one("#summary").render())
                    and "last 1.9000" in str(screen.query_one("#spark-eval .title").render())
                    and [str(label.render()) for label in screen.query("MemoryGauge > Label")]
                    == ["rank 0  68.0/80G", "rank 1  78.0/80G"])

        await wait_for(pilot, done)
        app.clear_notifications()  # the "run failed" toast times out, so a slow machine might miss it

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


async def _runs_shown(pilot, app: FsdpTuiApp) -> None:
    await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.runs_table.row_count == 5)
    app.screen.runs_table.focus()


def test_runs_browser(snap_compare, home, workdir, utc):
    record_all(home)
    assert snap_compare(FsdpTuiApp(home), terminal_size=SIZE, run_before=lambda pilot: _runs_shown(pilot, pilot.app))


def test_runs_browser_filtered_and_sorted(snap_compare, home, workdir, utc):
    record_all(home)

    async def ready(pilot) -> None:
        await _runs_shown(pilot, pilot.app)
        await pilot.press("slash", *"llama", "enter", *["s"] * 8, "S")
        pilot.app.screen.query_one("#run-filter").cursor_blink = False

    assert snap_compare(FsdpTuiApp(home), terminal_size=SIZE, run_before=ready)


@pytest.mark.parametrize("theme", BUILTIN_THEMES)
def test_theme(snap_compare, home, workdir, utc, theme):
    record_all(home)
    app = FsdpTuiApp(home, theme=theme)

    async def ready(pilot) -> None:
        await _runs_shown(pilot, app)
        assert app.theme == theme

    assert snap_compare(app, terminal_size=SIZE, run_before=ready)
