"""Kill the launcher mid-run: the run goes on; re-attaching adopts it, no line lost or doubled, no second job."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli_env, tagged, write_workload

pytestmark = pytest.mark.slow


def test_killed_launcher_is_adopted_on_reattach(home, tmp_path, monkeypatch):
    wl = write_workload(tmp_path, """experiment_name: reattach
mlflow: {enabled: false}
command: |
  echo job-started
  for i in $(seq 1 40); do echo "line $i"; sleep 0.1; done
""")
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home), cwd=ROOT)
    run_id = None
    for line in proc.stdout:
        event = json.loads(line)
        run_id = event["run_id"]
        if event["type"] == "NodeLines" and any(x.startswith("line 5") for x in event["lines"]):
            break
    os.kill(proc.pid, signal.SIGKILL)  # the launcher dies; the job does not
    proc.wait()
    time.sleep(0.5)
    assert tagged(run_id), "the run must keep going without its launcher"

    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    from launcher.runs.read.follower import follow_run

    async def follow() -> list:
        return [e async for e in follow_run(home, run_id)]

    evs = asyncio.run(asyncio.wait_for(follow(), 60))
    assert type(evs[-1]).__name__ == "RunFinished" and evs[-1].state.value == "succeeded"
    mirror = (home / "runs" / run_id / "nodes" / "0.log").read_text().splitlines()
    assert mirror.count("job-started") == 1, "one job only"
    assert [x for x in mirror if x.startswith("line ")] == [f"line {i}" for i in range(1, 41)]
    assert tagged(run_id) == []
