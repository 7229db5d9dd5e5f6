"""The check at the end of ``.ci/run`` finds a process the suite left running, and only the suite's."""

import os
import subprocess
import time
from pathlib import Path

from tests.support.leftovers import check


def _pids() -> set[int]:
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}


def _sleeping(env: dict) -> subprocess.Popen:
    """``sleep 300`` once it runs as itself (until its exec, /proc shows the forked test process)."""
    child = subprocess.Popen(["sleep", "300"], env=env, cwd="/")
    deadline = time.monotonic() + 10
    while b"sleep" not in Path(f"/proc/{child.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    return child


def test_a_process_the_suite_started_and_left_is_found():
    before = _pids()
    child = _sleeping({**os.environ, "FSDP_TUI_SUITE": "1"})
    before.discard(child.pid)  # its number may have been another's, ended since, on a busy machine
    try:  # not stopped by the check here: on a shared machine the window may hold another's process
        left = check(before, grace_s=0.5, stop=False)
        assert child.pid in left and "sleep 300" in left[child.pid]
    finally:
        child.kill()
        child.wait()


def test_a_process_that_is_not_the_suites_is_left_alone():
    before = _pids()
    env = {k: v for k, v in os.environ.items() if k != "FSDP_TUI_SUITE"}
    child = _sleeping(env)
    try:
        assert child.pid not in check(before, grace_s=0.1, stop=False)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_process_that_ends_within_the_grace_is_no_leftover():
    before = _pids()
    child = subprocess.Popen(["sleep", "0.3"], env={**os.environ, "FSDP_TUI_SUITE": "1"}, cwd="/")
    assert child.pid not in check(before, grace_s=5.0, stop=False)
    child.wait()
