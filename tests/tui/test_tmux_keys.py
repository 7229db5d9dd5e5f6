"""Keys as a real terminal sends them (tmux): what Pilot's key names cannot show. tmux, like many
terminals, sends ctrl+space as ctrl+@ (NUL); the editor must complete on either."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))


def _screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True).stdout


def _wait_screen(session: str, predicate, timeout: float = 30) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = _screen(session)
        if predicate(text):
            return text
        time.sleep(0.2)
    raise AssertionError("screen never showed what we waited for:\n" + _screen(session))


def _keys(session: str, *keys: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *keys], check=True)


def test_ctrl_space_completes_a_host_in_a_real_terminal(tmp_path):
    user = tmp_path / "user"
    (user / ".ssh").mkdir(parents=True)
    (user / ".ssh" / "config").write_text("Host gpu-a\n  HostName 127.0.0.251\n\nHost gpu-b\n  HostName 127.0.0.252\n")
    session = f"fsdp-tui-keys-{tmp_path.name[-12:]}"
    env = (f"HOME={shlex.quote(str(user))} FSDP_TUI_HOME={shlex.quote(str(tmp_path / 'data'))} "
           "TERM=xterm-256color")
    cmd = f"cd {shlex.quote(str(tmp_path))} && {env} {FSDP_TUI} new.yaml; echo EXITED=$?; sleep 30"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "45", cmd], check=True)
    try:
        picker = _wait_screen(session, lambda t: "N SSH hosts, built-in trainer" in t)
        order = [t for t in ("This machine, CPU demo", "N SSH hosts, built-in trainer") if t in picker]
        assert order[0] == "This machine, CPU demo"
        _keys(session, "Down", "Enter")
        _wait_screen(session, lambda t: "- <host-0>" in t and "valid" not in t.split("\n")[-3])
        _keys(session, "C-Space")  # tmux sends NUL: ctrl+@ to Textual
        menu = _wait_screen(session, lambda t: "from ~/.ssh/config" in t)
        assert "gpu-a" in menu and "gpu-b" in menu
        _keys(session, "Enter")
        _wait_screen(session, lambda t: "- gpu-a" in t and "<host-0>" not in t)
        _keys(session, "F2")  # the Plan tab, from the text
        _wait_screen(session, lambda t: "fix the errors to see the plan" in t or "node 0:" in t)
        _keys(session, "C-s")
        _wait_screen(session, lambda t: "saved" in t)
        _keys(session, "Escape")
        _wait_screen(session, lambda t: "Workloads" in t or "Runs" in t)
        _keys(session, "q")
        done = _wait_screen(session, lambda t: "EXITED=" in t)
        assert "EXITED=0" in done and "Traceback" not in done
        assert "- gpu-a" in (tmp_path / "new.yaml").read_text()
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
