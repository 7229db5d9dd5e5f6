"""The cost before launch, end to end on the demo through the CLI: a probe on the real node (this
machine, two gloo processes) gives an estimate that is kept; a dry run estimates from it; the run
launched next keeps that estimate and, at its end, its real wall time beside it; the estimate after that
comes from the run (its end measured too). No timing is asserted: only that each figure exists,
is recorded, and says where it came from; the run's memory prediction is said by the dry run and kept
beside its ranks' measured peaks."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import ROOT, cli, events

pytestmark = pytest.mark.slow

DEMO = ROOT / "sample_workloads/tiny_cpu.yaml"
SHORT = ("--set", "parameters.max_steps=7", "--set", "parameters.logging.eval_every_steps=3",
         "--set", "parameters.logging.eval_max_batches=1")


def test_probe_estimate_kept_and_compared_at_the_end(home):
    (home / "settings.json").write_text(json.dumps({"prices": {"currency": "EUR", "cpu_hour": 0.5}}))
    out = cli(home, "run", DEMO, "--dry-run", *SHORT)
    assert out.returncode == 0 and "estimate: nothing measured yet" in out.stdout
    assert "memory: each rank needs ~" in out.stdout and "  fits: " in out.stdout  # the model's config alone
    assert f"fsdp-tui doctor {DEMO} --estimate" in out.stdout

    out = cli(home, "doctor", DEMO, "--estimate", "--probe-steps", "3", "--probe-budget", "240", "--json", *SHORT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    probed = json.loads(out.stdout)["estimate"]
    probe_id = probed["probe_run"]
    est = probed["estimate"]
    assert est["source_run"] == probe_id and est["source"].startswith(f"probe {probe_id}")
    assert est["steps"] == 7 and est["unit"] == "CPU" and est["currency"] == "EUR"
    assert 0 < est["low_s"] <= est["wall_s"] <= est["high_s"] and est["cost"] > 0
    assert est["evals"] == 2 + 1 and est["correction"] is None  # at 3 and 6, and the last one
    assert any("the end" in item for item in est["unmeasured"])
    runs = {r["run_id"]: r for r in json.loads(cli(home, "runs", "--json").stdout)}
    assert runs[probe_id]["state"] == "cancelled"  # an ordinary run in the store, cancelled after its steps
    options = json.loads((home / "runs" / probe_id / "options.json").read_text())
    assert options["tags"] == {"fsdp_tui.probe": "1"}
    plan = json.loads((home / "runs" / probe_id / "plan.json").read_text())["workload"]
    assert plan["mlflow"]["enabled"] is False and plan["parameters"]["checkpoint"]["resume"] == "never"
    assert not (home / "nodes" / probe_id / "node-0" / "outputs").exists() or not any(
        (home / "nodes" / probe_id / "node-0" / "outputs").rglob(".metadata"))  # saved nothing

    out = cli(home, "run", DEMO, "--dry-run", *SHORT)
    assert f"measured by probe {probe_id} (steps 1-" in out.stdout and "CPU-hours, ~" in out.stdout

    out = cli(home, "run", DEMO, "--json", *SHORT, "--set", "mlflow.enabled=false")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    run_id = events(out.stdout)[0]["run_id"]
    kept = json.loads((home / "runs" / run_id / "estimate.json").read_text())
    assert kept["estimate"]["source_run"] == probe_id and kept["estimate"]["steps"] == 7
    real = kept["real"]
    assert real["succeeded"] and real["steps_done"] == 7 and real["real_wall_s"] > 0
    assert real["ratio"] == pytest.approx(real["real_wall_s"] / kept["estimate"]["wall_s"])
    assert real["error"] == pytest.approx((real["real_wall_s"] - kept["estimate"]["wall_s"]) / kept["estimate"]["wall_s"])

    shown = cli(home, "show", run_id).stdout
    assert "  estimate  " in shown and f"from probe {probe_id}" in shown and "; real " in shown
    # the trainer's memory prediction beside each rank's measured peak (resident memory on CPU)
    memory = json.loads(cli(home, "show", run_id, "--json").stdout)["memory"]
    assert memory["device"] == "cpu" and memory["peak_rank"] in (0, 1) and memory["peak_gib"] > 0
    assert f"  memory    peak {memory['peak_gib']:.2f} GiB (rank {memory['peak_rank']} of 2) against " in shown

    out = cli(home, "run", DEMO, "--dry-run", *SHORT)
    assert f"measured by run {run_id} (steps 1-7)" in out.stdout
    assert "not measured" not in out.stdout  # a finished run measured its end too
    assert "median real/estimated" not in out.stdout  # the run's ratio corrects estimates from probes only
