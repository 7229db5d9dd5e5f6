"""A job that prints every terminal control there is, shown in real terminals (tmux): the app's node pane,
``run --watch`` and ``logs``. Titles and clipboard stay as they were, no raw control reaches the terminal,
and the run's record keeps the job's bytes exactly."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import ROOT
from tests.support.hostile import CORPUS, hostile_log

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]
FSDP_TUI = str(Path(sys.executable).with_name("fsdp-tui"))
HUGE = 10_000_000


def _tmux(server: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", server, *args], capture_output=True, text=True).stdout


def _wait(server: str, session: str, predicate, timeout: float = 120) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = _tmux(server, "capture-pane", "-t", session, "-p")
        if predicate(text):
            return text
        time.sleep(0.1)
    raise AssertionError("the screen never showed what we waited for:\n" + text)


def test_hostile_output_through_the_app_watch_and_logs(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    payload = hostile_log()
    (tmp_path / "hostile.bin").write_bytes(payload)
    wl = tmp_path / "workload.yaml"
    wl.write_text(f"""experiment_name: hostile-output
mlflow: {{enabled: false}}
command: |
  sleep 2; cat {tmp_path / 'hostile.bin'}; sleep 1
  head -c {HUGE} /dev/zero | tr '\\0' x
  sleep 4
""")
    env = (f"FSDP_TUI_HOME={shlex.quote(str(home))} FSDP_TUI_ASSETS=/tmp/fsdp-tui-test-assets "
           "TERM=xterm-256color")
    server = f"fsdp-tui-hostile-{tmp_path.name[-12:]}"
    app_cmd = f"cd {shlex.quote(str(ROOT))} && {env} {FSDP_TUI} run {shlex.quote(str(wl))}; echo EXITED=$?; sleep 60"
    subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-s", "app", "-x", "160",
                    "-y", "45", app_cmd], check=True)
    try:
        _tmux(server, "set-option", "-g", "set-clipboard", "on")
        _tmux(server, "set-option", "-g", "allow-rename", "on")
        _tmux(server, "select-pane", "-t", "app", "-T", "clean-title")

        screen = _wait(server, "app", lambda t: "SUCCEEDED" in t and "progress 30%" in t)
        assert "start ok end" in screen
        assert "PWNED" not in screen and "progress 10%" not in screen
        _tmux(server, "send-keys", "-t", "app", "q")
        _wait(server, "app", lambda t: "EXITED=" in t, timeout=30)

        from launcher.runs.core.store import RunStore

        [first] = RunStore(home).list_runs()
        mirror = (home / "runs" / first.run_id / "nodes" / "0.log").read_bytes()
        assert mirror == payload + b"x" * HUGE

        raw = tmp_path / "terminal.raw"
        cli_cmd = (f"sleep 1; cd {shlex.quote(str(ROOT))} && {env} {FSDP_TUI} run {shlex.quote(str(wl))} --watch; "
                   f"echo WATCH=$?; {env} {FSDP_TUI} logs {first.run_id}; echo LOGS=$?; "
                   f"{env} {FSDP_TUI} logs {first.run_id} --tail 0; echo TAIL0=$?; sleep 60")
        _tmux(server, "new-session", "-d", "-s", "cli", "-x", "160", "-y", "45", cli_cmd)
        _tmux(server, "pipe-pane", "-t", "cli", "-o", f"cat >> {shlex.quote(str(raw))}")
        _tmux(server, "select-pane", "-t", "cli", "-T", "clean-title")
        _wait(server, "cli", lambda t: "TAIL0=" in t)
        time.sleep(0.5)

        titles = _tmux(server, "list-panes", "-a", "-F", "#{pane_title}|#{window_name}").split()
        assert all(t.startswith("clean-title|") and "PWNED" not in t for t in titles), titles
        assert _tmux(server, "list-buffers") == ""

        seen = raw.read_bytes().decode("utf-8", "replace")
        assert seen.count("start ok end") == 2 * (len(CORPUS) - 1) and seen.count("progress 30%") == 2
        assert "progress 10%" not in seen and "PWNED" not in seen and "UFdORUQ" not in seen
        assert "WATCH=0" in seen and "LOGS=0" in seen and "TAIL0=0" in seen
        after_logs = seen.split("LOGS=0", 1)[1].split("TAIL0=0", 1)[0]
        assert after_logs.strip() == ""  # --tail 0 prints nothing
        left = re.sub(r"\x1b\[[0-9;:]*m", "", seen).replace("\r\n", "\n")
        bad = sorted({hex(ord(c)) for c in left if (ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F})
        assert bad == [], bad
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True)
