"""Reading ``~/.ssh/config`` where no OpenSSH client is installed: asyncssh's parser, its refusals turned
into one line naming the file, the line and what to change. It differs from OpenSSH in a few places
(docs/ssh-config.md lists them); ``ssh -G`` is used wherever an ``ssh`` exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from launcher.backends.ssh.common import (
    DEFAULT_PORT,
    ResolvedHost,
    SshConfigError,
    Tokens,
    agent_socket,
    local_user,
)

NO_SSH = "OpenSSH's `ssh` is not installed here, so fsdp-tui reads the config with asyncssh's parser"


def resolve_with_asyncssh(name: str, user: str | None, port: int | None, jump: str | None,
                          path: Path) -> ResolvedHost:
    """The same answer as ``ssh -G`` would give, from asyncssh's parser (``SshConfigError`` if it refuses)."""
    from asyncssh.config import ConfigParseError, SSHClientConfig

    paths = [str(path)] if path.is_file() else []
    _refuse_unexpanded_exec(path)
    try:
        config = SSHClientConfig.load(None, paths, False, False, False, local_user(), user or (), name, port or ())
        if config.has_match_final():
            config = SSHClientConfig.load(None, paths, False, False, True, local_user(), user or (), name,
                                          port or ())
    except ConfigParseError as err:
        raise SshConfigError(_one_line(str(err))) from None
    except (OSError, ValueError) as err:
        raise SshConfigError(f"{path}: cannot be read: {err}") from None

    def get(option: str, default: Any = None) -> Any:  # asyncssh's config values: str, int or list
        return config.get(option, default)

    hostname = get("Hostname") or name
    resolved_port = port or int(get("Port") or DEFAULT_PORT)
    tokens = Tokens(name, hostname, resolved_port, user or get("User") or local_user(), get("HostKeyAlias"))
    identities = [tokens.expand(str(p)) for p in (get("IdentityFile") or _default_identities())]
    known = get("UserKnownHostsFile")
    if known is None:
        known = ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]
    globals_ = get("GlobalKnownHostsFile")
    if globals_ is None:
        globals_ = ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"]
    interval = get("ServerAliveInterval")
    command = get("ProxyCommand")
    proxy_jump = jump or get("ProxyJump")

    def algs(option: str) -> tuple[str, ...] | None:
        value = get(option)
        return tuple(value.split(",")) if value else None

    return ResolvedHost(
        name=name, hostname=hostname, port=resolved_port, user=tokens.user,
        identity_files=tuple(p for p in identities if Path(p).is_file()),
        missing_identity_files=tuple(p for p in identities if not Path(p).is_file()),
        identities_only=bool(get("IdentitiesOnly")),
        certificate_files=tuple(tokens.expand(str(p)) for p in get("CertificateFile") or ()),
        identity_agent=agent_socket(get("IdentityAgent"), tokens),
        proxy_jump=proxy_jump if proxy_jump and proxy_jump != "none" else None,
        proxy_command=(shlex.join(command) if isinstance(command, list) else command) if command and command != "none"
        else None,
        user_known_hosts=tuple(tokens.expand(p) for p in known), global_known_hosts=tuple(tokens.expand(p) for p in globals_),
        host_key_alias=get("HostKeyAlias"),
        server_alive_interval_s=float(interval) if interval else None,
        server_alive_count_max=int(get("ServerAliveCountMax") or 3) if interval else None,
        connect_timeout_s=float(get("ConnectTimeout")) if get("ConnectTimeout") else None,
        ciphers=algs("Ciphers"), kex_algs=algs("KexAlgorithms"), macs=algs("MACs"),
        host_key_algs=algs("HostKeyAlgorithms"), strict_host_key_checking=str(get("StrictHostKeyChecking") or "ask"),
        source="asyncssh")


def _refuse_unexpanded_exec(path: Path, depth: int = 0) -> None:
    """asyncssh runs ``Match exec`` commands without expanding their ``%`` tokens: the command then tests
    something else and the host is silently misrouted. Refused instead, naming the line."""
    if depth > 8 or not path.is_file():
        return
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    for number, line in enumerate(lines, 1):
        words = line.strip().replace("=", " ", 1).split(None, 1)
        if not words:
            continue
        keyword = words[0].lower()
        rest = words[1] if len(words) > 1 else ""
        if keyword == "match" and re.search(r"\bexec\b", rest) and re.search(r"%[a-zA-Z%]", rest):
            raise SshConfigError(f"{path} line {number}: Match exec with a % token: asyncssh runs the command "
                                 f"without expanding it, so it would test something else: write the value "
                                 f"itself ({NO_SSH}; installing openssh-client makes it read the config as ssh does)")
        if keyword == "include":
            for pattern in rest.split():
                full = Path(pattern).expanduser()
                if not full.is_absolute():
                    full = path.parent / pattern if depth else Path.home() / ".ssh" / pattern
                for found in sorted(full.parent.glob(full.name)):
                    _refuse_unexpanded_exec(found, depth + 1)


def _default_identities() -> list[str]:
    return [f"~/.ssh/{n}" for n in ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk", "id_dsa")]


def _one_line(message: str) -> str:
    """asyncssh's ``PATH line N: reason`` as a line a user can act on."""
    found = re.match(r"(?P<path>.+?) line (?P<line>\d+): (?P<reason>.*)", message)
    if not found:
        return f"{message} ({NO_SSH}): change the config so that asyncssh accepts it, or install openssh-client"
    reason = found["reason"]
    lowered = reason.lower()
    hint = "remove or reword that line"
    if "integer" in lowered:
        hint = "write the number (e.g. Port 22, not a service name)"
    elif "extra data" in lowered or "quotation" in lowered:
        hint = "move the comment onto a line of its own (asyncssh reads '#' after a value, and quotes in it)"
    elif "match condition" in lowered:
        hint = "asyncssh splits a Match line at '=': put the command in a script and run that"
    return (f"{found['path']} line {found['line']}: {reason}: {hint} ({NO_SSH}; "
            "installing openssh-client makes it read the config as ssh does)")
