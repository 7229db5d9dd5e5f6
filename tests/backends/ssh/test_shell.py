"""``fsdp-tui ssh RUN N -- COMMAND`` runs COMMAND as ``ssh host COMMAND`` would: one word is a shell command
line (``'pwd; ls'``), several are a command and its arguments, each quoted once. The remote line is checked
here by running it in a real shell (the user's own ``ssh`` hands it to one); the real namespace sshd host is
in ``tests/runs/test_node_files.py``, the run on this machine below."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher.backends.ssh.shell import command_line, ssh_argv
from launcher.workload.hosts import parse_host
from launcher.workload.machines import Ssh

CASES = [
    (["pwd; echo two"], ["{dir}", "two"]),
    (["cd sub && pwd"], ["{dir}/sub"]),
    (["echo $((1 + 2)) | cat"], ["3"]),
    (["printf", "%s|", "a b", "c"], ["a b|c|"]),
    (["echo", "$HOME;", "pwd"], ["$HOME; pwd"]),  # several words: each quoted once, nothing expanded
    (["ls", "my dir"], ["inside"]),
]


@pytest.mark.parametrize(("command", "expected"), CASES, ids=[" ".join(c) for c, _ in CASES])
def test_the_remote_line_runs_the_command_as_ssh_would(command, expected, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "my dir").mkdir()
    (tmp_path / "my dir" / "inside").write_text("")
    argv = ssh_argv(parse_host("node0"), Ssh(), str(tmp_path), command)
    assert argv[-2] == "node0" and argv[-3] == "--" and "-T" in argv
    remote = argv[-1]  # what sshd hands to the user's shell
    done = subprocess.run(["sh", "-c", remote], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [e.format(dir=tmp_path) for e in expected]


def test_one_word_is_a_command_line_several_are_quoted_once():
    assert command_line(["pwd; ls"]) == "pwd; ls"
    assert command_line(["ls", "my dir", "a;b"]) == "ls 'my dir' 'a;b'"


@pytest.mark.parametrize(("command", "expected", "code"), [
    (["pwd; echo two"], ["{dir}", "two"], 0),
    (["printf", "%s|", "a b", "c"], ["a b|c|"], 0),
    (["exit 3"], [], 3),
    (["no-such-program-here", "x"], [], 127),
])
def test_a_run_on_this_machine_runs_it_the_same_way(command, expected, code, tmp_path, capfd):
    from launcher.cli.ssh import _here

    assert _here(tmp_path, command) == code
    out, err = capfd.readouterr()
    assert out.splitlines() == [e.format(dir=tmp_path) for e in expected]
    if code == 127:
        assert err.strip() == "fsdp-tui ssh: no-such-program-here: No such file or directory"


def test_no_command_opens_a_login_shell_in_the_folder(tmp_path: Path):
    remote = ssh_argv(parse_host("node0"), Ssh(), "~/runs/r 1/node-0")[-1]
    assert remote.startswith("cd ~/'runs/r 1/node-0' 2>/dev/null ||") and remote.endswith('exec "${SHELL:-/bin/sh}" -l')
