"""The test switches' ledger (``tests/support/switches.py``): a name's switches take their numbers in turn,
and a switch another process removed while its holder held it fails the holder's removal, naming who."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.switches import make_switch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # network namespaces and a bridge: real parts of this machine


def _switch(count: int = 1):
    try:
        return make_switch(count, name="fswt", subnet="10.248")
    except RuntimeError as err:
        pytest.skip(str(err))


def test_one_names_switches_one_after_another_take_different_numbers():
    first = _switch()
    first.remove()
    second = _switch()
    second.remove()
    assert first.bridge != second.bridge and first.addrs != second.addrs


def test_a_switch_removed_by_another_process_fails_its_holders_removal_naming_it():
    switch = _switch(2)
    other = subprocess.run([sys.executable, "-c", "import sys; from tests.support.switches import Switch; "
                            "Switch(sys.argv[1], sys.argv[2:], []).remove()", switch.bridge, *switch.namespaces],
                           cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTEST_CURRENT_TEST": "tests/x.py::test_meddler (call)"})
    assert other.returncode == 0, other.stderr
    with pytest.raises(RuntimeError) as err:
        switch.remove()
    said = str(err.value)
    assert f"switch {switch.bridge} ({switch.gateway}/24) was touched by another process" in said
    listed_lines = said.split("held it: ", 1)[1].split("; ")
    assert len(listed_lines) == 1 and listed_lines[0].startswith("pid ") and " remove at " in listed_lines[0]
    assert f"pid {os.getpid()} " not in listed_lines[0] and listed_lines[0].endswith("(tests/x.py::test_meddler)")
    assert not Path(f"/sys/class/net/{switch.bridge}").exists()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed.split() for ns in switch.namespaces)
