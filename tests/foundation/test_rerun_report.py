"""A test that passes only on its rerun keeps its first failure in the run's output (``tests/support/reruns.py``):
without it, the cause of a rerun in CI could be found only by running the test again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_first_failure_of_a_rerun_test_is_printed_with_what_it_said(tmp_path):
    (tmp_path / "test_once.py").write_text(f"""
from pathlib import Path

def test_fails_the_first_time():
    print("said before the failure")
    mark = Path({str(tmp_path / "tried")!r})
    if not mark.exists():
        mark.write_text("")
        assert "first" == "second", "the first try's own cause"
""")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.support.reruns",
                          "--reruns", "1", "--rootdir", str(tmp_path), str(tmp_path / "test_once.py")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed, 1 rerun" in out.stdout
    first = out.stdout.split("first failure of ", 1)[1]
    assert first.startswith("test_once.py::test_fails_the_first_time (call), passed on its rerun")
    assert "AssertionError: the first try's own cause" in first and "said before the failure" in first
