"""The one reader of ``~/.ssh/config``: what OpenSSH would dial for a host (its ``HostName``, port,
user) and whether the config picks ciphers. asyncssh's own parser, so connecting and resolving agree."""

from __future__ import annotations

import functools
import getpass
from dataclasses import dataclass
from pathlib import Path

from launcher.paths import ssh_config_path
from launcher.workload.hosts import HostTarget
from launcher.workload.model import Ssh

DEFAULT_PORT = 22


@dataclass(frozen=True)
class ResolvedHost:
    hostname: str
    """The address to dial (``HostName``, or the name itself)."""
    port: int
    user: str | None
    sets_ciphers: bool
    """The config names ``Ciphers`` for this host: its choice wins over ours."""


def config_path() -> Path:
    return ssh_config_path()


def resolve(host: HostTarget, ssh: Ssh) -> ResolvedHost:
    """``host`` as OpenSSH would dial it: ``~/.ssh/config`` applied; ports and users written in the
    target or the workload's ``ssh`` section come first."""
    path = config_path()
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
    except OSError:
        key = None
    hostname, port, user, ciphers = _lookup(key, host.hostname)
    return ResolvedHost(hostname or host.hostname, host.port or ssh.port or port or DEFAULT_PORT,
                        host.user or ssh.user or user, ciphers)


@functools.lru_cache(maxsize=512)
def _lookup(key: tuple | None, name: str) -> tuple[str | None, int | None, str | None, bool]:
    """(HostName, Port, User, sets Ciphers) for ``name``; cached while the config file is unchanged."""
    if key is None or name.startswith("-"):
        return None, None, None, False
    from asyncssh.config import SSHClientConfig

    try:
        local_user = getpass.getuser()
    except KeyError:
        local_user = "root"
    config = SSHClientConfig.load(None, [key[0]], False, False, False, local_user, (), name, ())
    port = config.get("Port")
    return config.get("Hostname"), int(port) if port else None, config.get("User"), bool(config.get("Ciphers"))
