"""``fsdp-tui ssh RUN [NODE] [-- COMMAND...]``: a shell on one node of a run, in that node's run directory
(``sky ssh``'s counterpart). Over SSH it is the user's own ``ssh``, given what the launch resolved for that
node (:mod:`launcher.backends.ssh.shell`); for a run on this machine, a shell in the node's folder here."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.cli import add_run_argument, on_run, reads_as_number, shown_word
from launcher.words import node_at

if TYPE_CHECKING:
    from launcher.api import Client


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ssh", help="a shell on a node of a run, in its run directory (or run COMMAND there)",
                       description="A shell on node NODE (default 0) of RUN, in that node's run directory, "
                       "through your ssh with the host, user, port, key, known_hosts and jump hosts the launch "
                       "used. After --, a command to run there instead of a shell, as ssh runs one: a single "
                       "word is a shell command line ('pwd; ls'), several words are a command and its arguments, "
                       "each quoted once. For a run on this machine, a shell in the node's folder here.")
    add_run_argument(p)
    p.add_argument("node", metavar="NODE", nargs="?", help="the node's rank (default 0)")
    p.add_argument("remote_command", metavar="-- COMMAND", nargs=argparse.REMAINDER,
                   help="run this instead of a shell")
    p.set_defaults(handler=run)


@on_run("ssh")
def run(args: argparse.Namespace, client: Client, run_id: str) -> int:
    from launcher.words import ascii_number

    try:
        plan = client.runs.plan_of(run_id)
    except (OSError, ValueError, KeyError) as err:
        print(f"fsdp-tui ssh: run {run_id} has no plan on record ({err}): its nodes are not known", file=sys.stderr)
        return 2
    command = args.remote_command[1:] if args.remote_command[:1] == ["--"] else args.remote_command
    rank = 0
    asked = ascii_number(args.node) if args.node is not None else None
    if asked is not None:
        rank = asked
    elif args.node is not None and reads_as_number(args.node):  # '٣', ' 1', '+1', '1e3', '-1': no node number
        print(f"fsdp-tui ssh: {shown_word(args.node)} is not a node number: run {run_id} has nodes "
              f"0-{len(plan.nodes) - 1} (digits 0-9)", file=sys.stderr)
        return 2
    elif args.node is not None:  # `fsdp-tui ssh RUN -- COMMAND`: argparse took the command's first word
        command = [args.node, *command]
    if not 0 <= rank < len(plan.nodes):
        count = len(plan.nodes)
        which = "node 0 only" if count == 1 else f"nodes 0-{count - 1}"
        print(f"fsdp-tui ssh: run {run_id} has {which}", file=sys.stderr)
        return 2
    args.node = rank
    node = plan.nodes[rank]
    if plan.workload.compute.slurm is not None:
        print(f"fsdp-tui ssh: node {args.node} ran on a compute node of the SLURM job; this is the login node "
              f"{node.host.display if node.host else '(this machine)'}, in the node's folder on the shared disk "
              "(srun --jobid JOB --overlap --pty bash reaches a compute node while the job runs)", file=sys.stderr)
    if node.host is None or node.host.is_local:
        return _here(Path(node.node_dir).expanduser(), command)
    from launcher.api.nodes import SshConfigError

    binary = shutil.which("ssh")
    if binary is None:
        print("fsdp-tui ssh: needs OpenSSH's client (ssh) on this machine: apt-get install openssh-client",
              file=sys.stderr)
        return 2
    try:
        argv = client.nodes.shell_argv(plan, rank, command, binary=binary)
    except SshConfigError as err:
        print(f"fsdp-tui ssh: {node_at(args.node, node.host_display)}: {err}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    os.execv(binary, argv)
    return 0  # not reached


def _here(folder: Path, command: list[str]) -> int:
    if not folder.is_dir():
        print(f"fsdp-tui ssh: {folder} is not there (removed?)", file=sys.stderr)
        return 1
    if len(command) == 1:  # a shell command line, as over ssh: `pwd; ls`
        return subprocess.run([os.environ.get("SHELL") or "/bin/sh", "-c", command[0]], cwd=folder).returncode
    if command:
        try:
            return subprocess.run(command, cwd=folder).returncode
        except OSError as err:  # as a shell says it: the command is not there, or cannot run
            print(f"fsdp-tui ssh: {command[0]}: {err.strerror}", file=sys.stderr)
            return 127 if isinstance(err, FileNotFoundError) else 126
    shell = os.environ.get("SHELL") or "/bin/sh"
    print(f"a shell in {folder} (exit it to come back)", file=sys.stderr)
    os.chdir(folder)
    os.execv(shell, [shell, "-l"] if os.path.basename(shell) in ("bash", "zsh", "sh", "fish") else [shell])
    return 0  # not reached
