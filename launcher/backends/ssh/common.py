"""What every reading of ``~/.ssh/config`` produces (OpenSSH's ``ssh -G`` in :mod:`.config`, asyncssh's
parser in :mod:`.fallback`): the resolved host, its tokens, and the local user and agent they refer to."""

from __future__ import annotations

import getpass
import hashlib
import os
import pwd
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

DEFAULT_PORT = 22


class SshConfigError(ValueError):
    """The config cannot be read for a host: one line naming the file, the line and what to change."""


@dataclass(frozen=True)
class ResolvedHost:
    """What the SSH client does for one host (or jump hop), after the config and the workload's ``ssh:``."""

    name: str
    """The name as written (an alias or an address)."""
    hostname: str
    """The address to dial (``HostName``, or the name itself)."""
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    """``IdentityFile`` entries that exist, in order (the missing ones are skipped, as ``ssh`` does)."""
    missing_identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    certificate_files: tuple[str, ...] = ()
    identity_agent: str | None = None
    """The agent's socket, or ``None`` for no agent (``IdentityAgent none`` or no ``SSH_AUTH_SOCK``)."""
    proxy_jump: str | None = None
    """``ProxyJump`` hops, comma-separated, as written."""
    proxy_command: str | None = None
    """``ProxyCommand`` with its tokens expanded."""
    user_known_hosts: tuple[str, ...] = ()
    global_known_hosts: tuple[str, ...] = ()
    host_key_alias: str | None = None
    server_alive_interval_s: float | None = None
    """``ServerAliveInterval`` from the config (``None``: not set)."""
    server_alive_count_max: int | None = None
    connect_timeout_s: float | None = None
    ciphers: tuple[str, ...] | None = None
    """Algorithm lists the config chooses (``None``: OpenSSH's defaults, so ours apply)."""
    kex_algs: tuple[str, ...] | None = None
    macs: tuple[str, ...] | None = None
    host_key_algs: tuple[str, ...] | None = None
    strict_host_key_checking: str = "ask"
    source: Literal["ssh -G", "asyncssh"] = "ssh -G"
    """Which parser read the config."""

    @property
    def sets_ciphers(self) -> bool:
        """The config names ``Ciphers`` for this host: its choice wins over ours."""
        return self.ciphers is not None

    @property
    def key_name(self) -> str:
        """The name looked up in and written to known_hosts: the ``HostKeyAlias`` (port-less, as OpenSSH
        does), else ``host`` or ``[host]:port``."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.hostname if self.port == DEFAULT_PORT else f"[{self.hostname}]:{self.port}"

    @property
    def jump_hops(self) -> tuple[str, ...]:
        return tuple(h for h in (self.proxy_jump or "").split(",") if h) if self.proxy_jump != "none" else ()


def _passwd_home() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return str(Path.home())


def local_user() -> str:
    try:
        return getpass.getuser()
    except KeyError:
        return "root"


@dataclass(frozen=True)
class Tokens:
    """The values OpenSSH's ``%`` tokens stand for, for one host."""

    name: str
    hostname: str
    port: int
    user: str
    alias: str | None = None

    def expand(self, text: str, *, path: bool = True) -> str:
        """``text`` with ``%x`` tokens, ``${VAR}`` and (``path``) a leading ``~`` replaced, as OpenSSH does,
        with ``~`` and ``%d`` taken from ``$HOME``."""
        home = str(Path.home())
        local = socket.gethostname()
        table = {"%": "%", "d": home, "h": self.hostname, "n": self.name, "p": str(self.port), "r": self.user,
                 "u": local_user(), "l": local, "L": local.split(".")[0], "i": str(os.getuid()),
                 "k": self.alias or self.hostname,
                 "C": hashlib.sha1(f"{local}{self.hostname}{self.port}{self.user}".encode()).hexdigest()}
        text = re.sub(r"%(.)", lambda m: table.get(m.group(1), m.group(0)), text)
        text = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: os.environ.get(m.group(1), ""), text)
        if path and (text == "~" or text.startswith("~/")):
            text = home + text[1:]
        return text


def _home_path(path: str) -> str:
    """A path ``ssh`` expanded with the passwd home, moved under ``$HOME`` where the two differ."""
    passwd, home = _passwd_home().rstrip("/"), str(Path.home()).rstrip("/")
    if passwd != home and (path == passwd or path.startswith(passwd + "/")):
        return home + path[len(passwd):]
    return path


def agent_socket(value: str | None, tokens: Tokens) -> str | None:
    """``IdentityAgent``: ``none``, ``SSH_AUTH_SOCK`` (OpenSSH's special value), ``$VAR`` or a path."""
    if value is None or value == "SSH_AUTH_SOCK":
        return os.environ.get("SSH_AUTH_SOCK") or None
    if value.lower() == "none":
        return None
    if value.startswith("$"):
        return os.environ.get(value[1:].strip("{}")) or None
    return tokens.expand(value)
