"""The README's demo command in a real terminal (tmux): it trains, we watch, cancel, and quit."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import ROOT, cli, tagged

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))


def _screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True).stdout


def _wait_screen(session: str, predicate, timeout: float = 90) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = _screen(session)
        if predicate(text):
            return text
        time.sleep(0.1)
    raise AssertionError("screen never showed what we waited for:\n" + _screen(session))


def _cancel_left(home: Path) -> None:
    """A run the test left going (it failed before its cancel) is cancelled: its 2,000 steps would hold both
    cores long after the test."""
    from launcher.events import RunState

    for run in json.loads(cli(home, "runs", "--json").stdout or "[]"):
        if not RunState(run["state"]).is_final:
            cli(home, "cancel", run["run_id"])


def test_demo_in_a_real_terminal(tmp_path):
    session = f"fsdp-tui-smoke-{tmp_path.name[-12:]}"
    env = (f"FSDP_TUI_HOME={shlex.quote(str(tmp_path))} FSDP_TUI_ASSETS=/tmp/fsdp-tui-test-assets "
           "TERM=xterm-256color")
    cmd = (f"cd {shlex.quote(str(ROOT))} && {env} {FSDP_TUI} run sample_workloads/tiny_cpu.yaml "
           f"--set parameters.max_steps=2000 --set parameters.output_dir={shlex.quote(str(tmp_path / 'out'))}; "
           f"echo EXITED=$?; sleep 60")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "45", cmd], check=True)
    try:
        first = _wait_screen(session, lambda t: "RUNNING" in t and "step=" in t and "loss  last" in t)
        step_line = [ln for ln in first.splitlines() if "step=" in ln][-1]
        later = _wait_screen(session, lambda t: [ln for ln in t.splitlines() if "step=" in ln][-1:] != [step_line])
        assert "▁" in later or "▂" in later or "█" in later  # the loss sparkline has bars
        run_id = next(w for w in later.split() if "tiny-cpu-demo" in w).split(":")[-1].strip()
        assert tagged(run_id)
        subprocess.run(["tmux", "send-keys", "-t", session, "c"], check=True)
        _wait_screen(session, lambda t: "Cancel run" in t, timeout=10)
        subprocess.run(["tmux", "send-keys", "-t", session, "y"], check=True)
        _wait_screen(session, lambda t: "CANCELLED" in t, timeout=30)
        assert tagged(run_id) == []
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        done = _wait_screen(session, lambda t: "EXITED=" in t, timeout=20)
        assert "EXITED=0" in done and "Traceback" not in done
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        _cancel_left(tmp_path)
