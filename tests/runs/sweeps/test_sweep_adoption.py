"""A sweep's driver SIGKILLed for real while its first variant runs: the next ``sweep show`` gives the sweep
a new driver (one), which follows the running variant instead of skipping it and starts the rest; a
failed sweep is resumed with the variant that failed."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from launcher.runs.core.store import RunStore
from launcher.runs.sweeps.driver import driver_alive
from launcher.runs.sweeps.record import load_sweep
from tests.support.cli import FSDP_TUI, ROOT, cli, cli_env, wait_until, write_workload

pytestmark = pytest.mark.slow

SWEEP = """experiment_name: sweep-adopted
mlflow: {{enabled: false}}
command: |
  echo "variant $WHICH"
  if [ "$WHICH" = one ]; then while [ ! -e {release} ]; do sleep 0.1; done; fi
  if [ "$WHICH" = two ] && [ ! -e {failed_once} ]; then touch {failed_once}; exit 3; fi
  echo done
sweep:
  parallel: 2
  grid:
    env_variables.WHICH: [one, two]
"""



def test_a_killed_sweep_driver_is_adopted_and_a_failed_sweep_resumed(home, tmp_path):
    release, failed_once = tmp_path / "release", tmp_path / "failed-once"
    wl = write_workload(tmp_path, SWEEP.format(release=release, failed_once=failed_once))
    follower = subprocess.Popen([FSDP_TUI, "sweep", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                                env=cli_env(home), cwd=ROOT)
    sweep_id = json.loads(follower.stdout.readline())["sweep_id"]
    follower.kill()  # no watcher: only the command below may adopt the sweep
    follower.wait()
    first = wait_until(lambda: (lambda r: r.variants[0].state == "running" and r)(load_sweep(home, sweep_id)), 60,
                  "variant 1 running")
    os.kill(first.driver_pid, signal.SIGKILL)
    wait_until(lambda: not driver_alive(home, sweep_id), 10, "the driver gone")
    release.touch()  # variant 1 ends while nothing drives the sweep

    shown = cli(home, "sweep", "show", sweep_id, timeout=60)
    assert shown.returncode == 0 and "a new one goes on with it" in shown.stderr, shown.stderr
    wait_until(lambda: driver_alive(home, sweep_id) or load_sweep(home, sweep_id).is_final, 60, "a new driver")
    ended = wait_until(lambda: (lambda r: r.is_final and r)(load_sweep(home, sweep_id)), 120, "the sweep's end")
    assert [v.state for v in ended.variants] == ["succeeded", "failed"], ended.variants
    assert ended.state == "failed" and ended.detail == "1/2 variants succeeded"
    assert len(RunStore(home).list_runs()) == 2  # variant 1 followed, never started twice

    resumed = cli(home, "sweep", "resume", sweep_id, "--json", timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    record = load_sweep(home, sweep_id)
    assert record.state == "succeeded" and record.detail == "2/2 variants succeeded"
    assert record.variants[1].run_id != ended.variants[1].run_id
    assert len(RunStore(home).list_runs()) == 3  # the failed run stays; only variant 2 ran again
    again = cli(home, "sweep", "resume", sweep_id, timeout=60)
    assert again.returncode == 1 and "nothing to resume" in again.stderr
