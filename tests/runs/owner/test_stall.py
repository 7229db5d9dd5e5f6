"""A silent hang, for real: two torchrun workers (gloo), rank 1 sleeps forever at step 5 while rank 0
waits for it in all_reduce. The run is flagged stalled (events, runs, show, the monitor), torch's flight
recorder names the collective rank 1 never entered, every rank's stack is one key away (py-spy), and the
run's triage says stalled."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli, cli_env, tagged, write_workload
from tests.support.hung_rank import HUNG_RANK

pytestmark = pytest.mark.slow


def test_a_hung_rank_is_flagged_and_its_stack_shown(home, tmp_path, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "hang.py").write_text(HUNG_RANK)
    wl = write_workload(tmp_path, f"""experiment_name: hung
mlflow: {{enabled: false}}
environment: {{python: {sys.executable}}}
code_source: {{type: snapshot, snapshot: {{root_path: {code}}}}}
command: python -m torch.distributed.run --nproc_per_node=2 --master_port="$MASTER_PORT" "$CODE_SOURCE_PATH/hang.py"
env_variables: {{OMP_NUM_THREADS: 1, PYTHONPATH: {ROOT}}}
metrics: {{stall_factor: 5, stall_min_s: 3}}
""")
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home), cwd=ROOT)
    run_id, stalled, collective = None, None, ""
    try:
        for line in proc.stdout:
            event = json.loads(line)
            run_id = event["run_id"]
            if event["type"] == "RunStateChanged" and event["detail"].startswith("stalled"):
                stalled = stalled or event["detail"]
                if "(flight recorder)" in event["detail"]:  # the stacks and collectives, taken at once
                    collective = event["detail"]
                    break
        assert stalled and stalled.startswith("stalled at step 5: no step for"), stalled
        assert "rank 1 (node 0) never entered all_reduce #6; rank 0 (node 0) waits in it" in collective
        assert list((home / "runs" / run_id / "stacks").glob("*-node0-rank1-flight-recorder.json"))
        shown = cli(home, "show", run_id).stdout
        assert "never entered all_reduce #6" in shown and "stalled at step 5" in shown, shown
        assert "stalled at step 5" in cli(home, "runs").stdout

        dumps = cli(home, "stacks", run_id, timeout=120)
        assert dumps.returncode == 0, dumps.stderr
        assert "(py-spy)" in dumps.stdout and "hang_forever" in dumps.stdout and "all_reduce" in dumps.stdout
        assert "rank 1" in dumps.stdout.split("hang_forever")[0].rsplit("===", 2)[-2]

        # The monitor says it and shows the stacks with one key.
        from tests.support.tui import wait_for
        from tui.app import FsdpTuiApp
        from tui.screens.stacks import StacksModal

        monkeypatch.setenv("FSDP_TUI_HOME", str(home))

        async def in_the_app() -> str:
            app = FsdpTuiApp(home, run_id=run_id)
            async with app.run_test(size=(140, 40)) as pilot:
                await wait_for(pilot, lambda: type(app.screen).__name__ == "RunMonitorScreen"
                               and "STALLED" in str(app.screen.query_one("#summary").render()), timeout=60)
                await pilot.press("s")
                await wait_for(pilot, lambda: isinstance(app.screen, StacksModal), timeout=60)
                await pilot.pause()  # its mount done before the app closes (not a query in a closing app)
                return app.screen.text

        assert "hang_forever" in asyncio.run(in_the_app())

        cancel = cli(home, "cancel", run_id)
        assert cancel.returncode == 0, cancel.stderr
        rest = [json.loads(x) for x in proc.stdout]
        end = rest[-1]
        assert end["type"] == "RunFinished" and end["state"] == "cancelled"
        assert end["triage"]["signature"] == "stalled", end["triage"]
        assert tagged(run_id) == []
    finally:
        proc.kill()
        if run_id:
            deadline = time.monotonic() + 30
            while tagged(run_id) and time.monotonic() < deadline:
                cli(home, "cancel", run_id)
