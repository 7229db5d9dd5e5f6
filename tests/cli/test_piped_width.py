"""Piped (a script, ``grep``, a file), ``doctor`` and ``nettest`` print each row on one line: rich lays a table
out at 80 columns when its output is not a terminal, and each ``inside node 0 (host)`` row of a nettest and
each long doctor detail wrapped there. ``COLUMNS`` still sets the width either way."""

from __future__ import annotations

import json
import os
import subprocess

from launcher.doctor.judge import Check, DoctorReport, NodeReport
from tests.support.cli import FSDP_TUI, ROOT
from tests.support.nettest import result

LONG_HOST = "gpu-node-with-a-long-name-17.cluster.example.org"


def _piped(home, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    environ.update(FSDP_TUI_HOME=str(home), **env)
    return subprocess.run([FSDP_TUI, *args], capture_output=True, text=True, env=environ, cwd=ROOT, timeout=120)


def test_a_kept_nettest_piped_has_one_line_per_row(tmp_path):
    (tmp_path / "nettests").mkdir()
    (tmp_path / "nettests" / "t-1.json").write_text(json.dumps({
        "run_id": "t-1", "started_at": 1.0, "nodes": [LONG_HOST, LONG_HOST.replace("17", "18")],
        "result": result(nnodes=2, local=2)}))
    out = _piped(tmp_path, "nettests", "t-1")
    assert out.returncode in (0, 1), out.stderr
    rows = [line.strip() for line in out.stdout.splitlines() if line.strip().startswith(("inside node", "across", "whole world"))]
    assert len(rows) == 12 and all(line.endswith("/s") for line in rows), out.stdout  # busbw, the last column
    assert any(f"inside node 0 ({LONG_HOST})" in line for line in rows)
    narrow = _piped(tmp_path, "nettests", "t-1", COLUMNS="60")  # asked for: the terminal's width is honoured
    assert max(map(len, narrow.stdout.splitlines())) <= 60


def test_doctor_piped_keeps_each_check_on_its_line(capsys, monkeypatch):
    from launcher.cli.doctor import render

    monkeypatch.delenv("COLUMNS", raising=False)
    detail = "torch 2.13.0+cpu in /home/someone/venvs/a-long-virtual-environment-name/bin/python3 (CPU-only build)"
    render(DoctorReport((NodeReport(0, f"node 0 ({LONG_HOST})", (
        Check("torch", "warning", detail, "install a CUDA build of torch on this node: pip install torch"),)),)))
    lines = capsys.readouterr().out.splitlines()
    assert any(line.strip().startswith("torch") and line.rstrip().endswith("(CPU-only build)") for line in lines), lines
    assert any(line.strip() == "-> install a CUDA build of torch on this node: pip install torch" for line in lines)


def test_the_console_is_wide_only_when_piped(monkeypatch):
    from launcher.cli import PIPED_WIDTH, console

    for name in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE"):  # a forced terminal named dumb is 80 wide in rich
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert console().width == PIPED_WIDTH
    monkeypatch.setenv("COLUMNS", "100")
    assert console().width == 100
