"""Idle GPUs: the policy on recorded ``nvidia-smi`` samples (pure, table-driven), and one real local run
whose node reports recorded samples through the node protocol. There is no GPU here: a stand-in
``nvidia-smi`` on PATH prints output recorded from an idle 2-GPU node (the only mocked part)."""

from __future__ import annotations

import json
import os

import pytest

from launcher.events import GpuSample, RunState
from launcher.runs.owner.idle import IdleGuard, IdleWatch
from launcher.workload.idle import IdlePolicy

# `nvidia-smi --query-gpu=index,name,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits`
IDLE_SMI = "0, NVIDIA H100 80GB HBM3, 61234, 81559, 0\n1, NVIDIA H100 80GB HBM3, 60876, 81559, 2\n"
BUSY_SMI = "0, NVIDIA H100 80GB HBM3, 71234, 81559, 98\n1, NVIDIA H100 80GB HBM3, 70876, 81559, 97\n"


def samples(text: str) -> tuple[GpuSample, ...]:
    out = []
    for line in text.splitlines():
        i, name, used, total, util = (p.strip() for p in line.split(","))
        out.append(GpuSample(int(i), name, float(used), float(total), float(util)))
    return tuple(out)


IDLE, BUSY = samples(IDLE_SMI), samples(BUSY_SMI)


@pytest.mark.parametrize(("feed", "idle_for"), [
    ([], None),                                                 # nothing reported (CPU nodes)
    ([(0, IDLE, 0)], 0),
    ([(0, IDLE, 0), (0, IDLE, 300)], 300),
    ([(0, IDLE, 0), (0, BUSY, 100), (0, IDLE, 200), (0, IDLE, 260)], 60),  # busy resets the clock
    ([(0, IDLE, 0), (1, IDLE, 50), (0, IDLE, 300), (1, IDLE, 320)], 270),  # every node, the least idle
    ([(0, IDLE, 0), (1, BUSY, 50), (0, IDLE, 300)], None),     # one busy node: the run is working
    ([(0, IDLE, 0), (0, (), 900)], 0),                         # no sample is not an idle sample
])
def test_idle_time_is_measured_between_samples(feed, idle_for):
    watch = IdleWatch(below_pct=5)
    for rank, got, at in feed:
        watch.saw(rank, got, at)
    assert watch.idle_for() == idle_for


def test_the_guard_flags_once_stops_after_the_grace_and_clears_when_busy():
    guard = IdleGuard(IdlePolicy(below_pct=5, for_s=600, stop_after_s=300))
    verdicts = []
    for at, got in ((0, IDLE), (599, IDLE), (600, IDLE), (700, IDLE), (900, IDLE), (1000, IDLE)):
        guard.saw(0, got, at)
        verdicts.append(guard.check(RunState.RUNNING))
    assert [v.flag is not None for v in verdicts] == [False, False, True, False, True, False]
    assert [v.stop for v in verdicts] == [False, False, False, False, True, False]
    assert verdicts[2].flag == "idle GPUs: every GPU under 5% for 10 min (node 0 at most 2%)"
    assert verdicts[4].flag.endswith("stopped by metrics.idle_policy")

    only_flag = IdleGuard(IdlePolicy(for_s=60))
    only_flag.saw(0, IDLE, 0)
    only_flag.saw(0, IDLE, 100)
    assert only_flag.check(RunState.STARTING).flag is None  # only while the run runs
    assert only_flag.check(RunState.RUNNING).flag.startswith("idle GPUs") and not only_flag.stopping
    only_flag.saw(0, BUSY, 130)
    assert only_flag.check(RunState.RUNNING).flag == "GPUs busy again"


@pytest.mark.slow
def test_a_run_with_idle_gpus_is_flagged_and_stopped_by_its_policy(home, tmp_path):
    from tests.support.cli import cli, events, write_workload

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '%s' '{IDLE_SMI}'\n")
    smi.chmod(0o755)
    wl = write_workload(tmp_path, "experiment_name: idle\nmlflow: {enabled: false}\ncommand: sleep 120\n"
                                  "metrics: {idle_policy: {below_pct: 5, for_s: 1, stop_after_s: 0}}\n")
    out = cli(home, "run", wl, "--json", timeout=180, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    evs = events(out.stdout)
    assert evs[-1]["type"] == "RunFinished" and evs[-1]["state"] == "cancelled", out.stdout[-2000:]
    said = [e["detail"] for e in evs if e["type"] == "RunStateChanged" and e["state"] == "running"]
    assert any(d.startswith("idle GPUs: every GPU under 5% for ") and "node 0 at most 2%" in d for d in said)
    assert evs[-1]["triage"]["signature"] == "idle"
    telemetry = [e for e in evs if e["type"] == "GpuTelemetry"]
    assert telemetry and telemetry[0]["gpus"][1]["utilization_pct"] == 2.0  # through the node protocol
    [listed] = json.loads(cli(home, "runs", "--json").stdout)
    assert listed["state"] == "cancelled" and "stopped by metrics.idle_policy" in listed["detail"]
