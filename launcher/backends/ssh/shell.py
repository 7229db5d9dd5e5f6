"""A shell on a run's node, as the user's own ``ssh`` opens it (``fsdp-tui ssh RUN NODE``).

The command line names what the launcher itself resolved for that node: the workload's ``ssh:`` user,
port, jump hosts, key and known-hosts files on top of ``~/.ssh/config`` (read as fsdp-tui reads it, from
``$HOME``), and host keys checked strictly, never accepted on first sight: ``ssh`` reaches the machine
the launch reached, or refuses as the launch would."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from launcher.backends.ssh.common import _passwd_home
from launcher.backends.ssh.config import config_path, resolve
from launcher.backends.ssh.hostkeys import all_files
from launcher.paths import shell_path
from launcher.workload.hosts import HostTarget
from launcher.workload.machines import Ssh


def ssh_argv(host: HostTarget, ssh: Ssh, directory: str, command: list[str] | None = None,
             binary: str = "ssh") -> list[str]:
    """``ssh ... HOST 'cd DIR && exec $SHELL -l'`` (or ``command`` run in DIR, see :func:`command_line`) for
    one node of a run."""
    resolved = resolve(host, ssh)
    args = [binary]
    if os.path.realpath(str(Path.home())) != os.path.realpath(_passwd_home()):
        args += ["-F", str(config_path()) if config_path().is_file() else "none"]
    user = host.user or ssh.user
    port = host.port or ssh.port
    if user:
        args += ["-l", user]
    if port:
        args += ["-p", str(port)]
    if ssh.proxy_jump:
        args += ["-J", ssh.proxy_jump]
    keys = [str(Path(ssh.identity_file).expanduser())] if ssh.identity_file else list(resolved.identity_files)
    for key in keys:
        args += ["-i", key]
    if ssh.identity_file:
        args += ["-o", "IdentitiesOnly=yes"]  # as the launch: only the workload's key
    files = " ".join(str(p) for p in all_files(resolved, ssh))
    args += ["-o", f"UserKnownHostsFile={files}", "-o", "StrictHostKeyChecking=yes",
             "-o", f"ConnectTimeout={ssh.connect_timeout_s:g}"]
    where = shell_path(directory)
    then = command_line(command) if command else 'exec "${SHELL:-/bin/sh}" -l'
    args += ["-t" if not command else "-T", "--", host.hostname,
             f"cd {where} 2>/dev/null || {{ echo 'fsdp-tui: {_quoted_note(directory)} is not there (removed?)' >&2;"
             f" exit 1; }}; {then}"]
    return args


def command_line(command: list[str]) -> str:
    """``COMMAND`` of ``fsdp-tui ssh RUN N -- COMMAND`` as the remote shell gets it, as ``ssh`` users expect:
    one word is a shell command line of its own (``'pwd; ls'``, ``'cd x && make'``), several are one command
    and its arguments, each quoted once (``ls 'my dir'`` lists one folder)."""
    return command[0] if len(command) == 1 else shlex.join(command)


def _quoted_note(path: str) -> str:
    return path.replace("'", "")
