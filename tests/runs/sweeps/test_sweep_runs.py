"""Sweeps for real on this machine: variants are ordinary runs (torchrun, gloo, the built-in trainer),
one forced to fail; the comparison, its CSV and MLflow's parent and children; and a sweep cancelled
from the app leaves no process and starts nothing more."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import pytest

from launcher.present.comparison import render
from launcher.runs.core.store import RunStore
from launcher.runs.read.comparison import sweep_stats
from launcher.runs.sweeps.driver import driver_alive
from launcher.runs.sweeps.record import load_sweep
from tests.support.cli import FSDP_TUI, ROOT, cli, cli_env, tagged, wait_tracked, write_workload

pytestmark = pytest.mark.slow
SAMPLE = ROOT / "sample_workloads" / "sharding_sweep_cpu.yaml"


def test_a_cpu_sweep_compares_its_variants_and_a_failed_one_keeps_its_signature(home):
    # The sample's model and data at a few steps, every variant told to save into one fixed folder: a
    # variant whose data fails past the rows validate reads, then full_shard and no_shard.
    bad = home.parent / "late-gap.jsonl"
    rows = (ROOT / "trainer/data/tiny_alpaca.jsonl").read_text().splitlines()[:25]
    bad.write_text("\n".join(rows) + '\n{"instruction": "no answer here"}\n')
    sweep = (f"\nsweep:\n  variants:\n    - {{parameters.dataset_name: {bad}}}\n"
             "    - {parameters.fsdp.sharding: full_shard}\n    - {parameters.fsdp.sharding: no_shard}\n")
    wl = write_workload(home.parent, SAMPLE.read_text().split("\nsweep:")[0] + sweep)
    shared = home.parent / "shared"
    sets = ["--set", "parameters.max_steps=3", "--set", "parameters.logging.eval_every_steps=3",
            "--set", f"parameters.output_dir={shared}", "--set", "parameters.checkpoint.save_final=true",
            "--set", "parameters.logging.eval_max_batches=1"]
    proc = subprocess.run([FSDP_TUI, "sweep", str(wl), *sets, "--json"], capture_output=True, text=True,
                          timeout=900, env=cli_env(home), cwd=ROOT)
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    sweep_id = lines[0]["sweep_id"]
    assert lines[0]["event"] == "sweep_started" and all(x["sweep_id"] == sweep_id for x in lines)
    assert proc.returncode == 1, proc.stderr  # a variant failed
    assert f"variants 1-3 would share output_dir '{shared}'" in proc.stderr
    record = load_sweep(home, sweep_id)
    assert record.state == "failed" and record.detail == "2/3 variants succeeded"
    assert [v.state for v in record.variants] == ["failed", "succeeded", "succeeded"]
    rows = sweep_stats(home, record)
    assert f": data, exit code 1: {bad}:26: parameters.dataset_name: row has no 'output'" in rows[0].signature, \
        rows[0].signature
    full, none = rows[1], rows[2]
    for r in (full, none):
        assert r.tokens_per_s and r.step_time_s and r.final_loss and r.peak_gib and r.wall_s and r.steps == 3
    assert none.peak_gib > full.peak_gib  # no_shard holds whole parameters, grads and optimizer state per rank
    # Each variant saved into its own folder under the fixed one: neither resumed the other's checkpoint.
    for v in record.variants[1:]:
        assert [p.name for p in (shared / v.run_id / "checkpoints").iterdir()] == ["step-00000003"]
    shown = cli(home, "show", record.variants[1].run_id).stdout
    assert "  data      2280 examples + 120 held out (alpaca), none cut at max_seq_len 64\n" in shown, shown
    shown = cli(home, "sweep", "show", sweep_id, "--format", "csv")
    assert shown.stdout == render(rows, "csv")
    parsed = list(csv.DictReader(io.StringIO(shown.stdout)))
    assert [float(p["peak_gib"]) for p in parsed[1:]] == [full.peak_gib, none.peak_gib]
    # Each variant is an ordinary run, and MLflow has the sweep's run as the parent of the three.
    assert {r.run_id for r in RunStore(home).list_runs()} == {v.run_id for v in record.variants}
    from mlflow import MlflowClient

    wait_tracked(home)
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    exp = client.get_experiment_by_name("sharding-sweep-cpu")
    runs = client.search_runs([exp.experiment_id])
    parent = [r for r in runs if r.info.run_name == sweep_id]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == record.mlflow_parent]
    assert len(parent) == 1 and parent[0].info.run_id == record.mlflow_parent
    assert sorted(r.info.run_name for r in children) == sorted(v.run_id for v in record.variants)
    # The parent holds its variants' totals, as each variant logged its own at its end.
    assert parent[0].data.metrics["cpu_hours"] == pytest.approx(
        sum(r.data.metrics.get("cpu_hours", 0.0) for r in children), rel=1e-9)
    assert parent[0].data.metrics["cpu_hours"] > 0
    listed = json.loads(cli(home, "sweeps", "--json").stdout)
    assert [s["sweep_id"] for s in listed] == [sweep_id]


TICKING = """experiment_name: sweep-cancel
command: |
  python -c "import os, time; os.setsid(); time.sleep(300)" &
  while true; do echo tick $WHICH; sleep 0.2; done
mlflow: {enabled: false}
sweep:
  parallel: 2
  grid:
    env_variables.WHICH: [one, two, three]
"""


async def test_cancel_from_the_app_leaves_no_process_and_starts_nothing_more(home, tmp_path, monkeypatch):
    from tests.support.tui import wait_for
    from tui.app import FsdpTuiApp
    from tui.screens.home import HomeScreen
    from tui.screens.sweep import SweepScreen

    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    wl = write_workload(tmp_path, TICKING)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen))
        app.launch_sweep(wl)  # `w` on the home screen; `l` launches the file as written
        await wait_for(pilot, lambda: isinstance(app.screen, SweepScreen), timeout=60)
        screen = app.screen
        record = load_sweep(home, screen.sweep_id)
        first, second = record.variants[0].run_id, record.variants[1].run_id
        # Two at once (parallel: 2), the second started once the first runs: each has its own port.
        await wait_for(pilot, lambda: len(tagged(first)) >= 2 and len(tagged(second)) >= 2, timeout=120)
        await pilot.press("x")
        await pilot.press("y")
        await wait_for(pilot, lambda: load_sweep(home, screen.sweep_id).is_final, timeout=120)
        record = load_sweep(home, screen.sweep_id)
        assert record.state == "cancelled"
        assert [v.state for v in record.variants] == ["cancelled", "cancelled", "skipped"]
        assert tagged(first) == [] and tagged(second) == []
        assert RunStore(home).get_run(record.variants[2].run_id) is None  # never started
        await wait_for(pilot, lambda: not driver_alive(home, record.sweep_id), timeout=30)
        await wait_for(pilot, lambda: screen.state == "cancelled", timeout=30)
        assert "cancelled" in str(screen.query_one("#sweep-title").render())
