"""``fsdp-tui gpus``: parsing recorded ``nvidia-smi`` output (pure), and one real query of this machine
through the backend whose ``nvidia-smi`` is a stand-in printing recorded output around a real tagged
process (no GPU here: the stand-in is the only mocked part); ``--stop`` stops a leftover of an ended run."""

from __future__ import annotations

import os
import subprocess

import pytest

from launcher.runs.gpu_holders import parse_holders

GPUS = ("0, GPU-11111111-aaaa, NVIDIA H100 80GB HBM3, 61234, 81559\n"
        "1, GPU-22222222-bbbb, NVIDIA H100 80GB HBM3, 4, 81559\n")
APPS = ("GPU-11111111-aaaa, 4242, /usr/bin/python3, 61000\n"
        "GPU-11111111-aaaa, 4343, python, my, script, [N/A]\n"
        "GPU-99999999-zzzz, 77, ghost, 12\n"
        "not a row\n")


def test_holders_are_matched_to_gpus_and_runs():
    holders, count = parse_holders("n1", GPUS, APPS, {"4242": "run-a"})
    assert count == 2
    assert [(h.gpu, h.pid, h.process, h.used_mib, h.run_id) for h in holders] == [
        (None, 77, "ghost", 12.0, None),                      # a GPU the listing did not name
        (0, 4242, "/usr/bin/python3", 61000.0, "run-a"),
        (0, 4343, "python, my, script", None, None),
    ]
    assert parse_holders("n1", "", "", {}) == ([], 0)


@pytest.mark.slow
def test_gpus_lists_a_leftover_of_an_ended_run_and_stops_it(home, tmp_path):
    from launcher.events import RunState
    from launcher.runs.core.store import RunStore
    from launcher.workload.model import Workload
    from launcher.workload.plan import build_plan
    from tests.support.cli import cli

    plan = build_plan(Workload.model_validate({"experiment_name": "gone", "command": "true"}), run_id="run-gone")
    store = RunStore(home)
    store.create_run(plan, None, "")
    store.set_state("run-gone", RunState.CANCELLED, 1)
    leftover = subprocess.Popen(["sleep", "120"], env={**os.environ, "FSDP_TUI_RUN_ID": "run-gone"})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        "#!/bin/sh\ncase \"$1\" in\n"
        f"  --query-gpu=*) printf '%s' '{GPUS}' ;;\n"
        f"  *) printf 'GPU-22222222-bbbb, {leftover.pid}, python3, 60000\\nGPU-11111111-aaaa, 1, other, 5\\n' ;;\n"
        "esac\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    path = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    try:
        stopped = cli(home, "gpus", "localhost", "--stop", **path).stdout  # one call: list, stop, list again
        assert f"node 0 (localhost): stopped {leftover.pid}\n" in stopped, stopped
        # the stand-in still lists it: how a leftover is shown
        assert f"gpu 1  pid {leftover.pid}" in stopped and "run run-gone (cancelled: a leftover" in stopped
        assert "gpu 0  pid 1 " in stopped and "not in this data dir" not in stopped and "not ours" in stopped
        assert leftover.wait(timeout=30) is not None
    finally:
        leftover.kill()
