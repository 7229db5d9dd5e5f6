"""The CLI against real sshd hosts (``hosts``, ``ns_hosts`` in tests/support/cli.py): a command run with the
client's HOME (its ~/.ssh/config names the hosts), and the interface gloo binds on them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cli import FSDP_TUI, ROOT, cli_env


def ssh_cli(home: Path, client: Path, *args: str, timeout: int = 300):
    return subprocess.run([FSDP_TUI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(home, HOME=str(client)), cwd=ROOT)


def gloo_iface(started) -> str:
    """The interface gloo binds on each host: the namespace's own, or loopback for loopback hosts."""
    from tests.support.switches import NS_IFACE

    return NS_IFACE if started[0].netns else "lo"
