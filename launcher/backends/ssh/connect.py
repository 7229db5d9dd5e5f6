"""SSH connections to nodes with asyncssh: ``~/.ssh/config`` and ``known_hosts`` as OpenSSH reads
them, the workload's ``ssh`` section on top, host keys always verified, explicit timeouts and keepalives.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from pathlib import Path

from launcher.backends.ssh.config import resolve
from launcher.workload.hosts import HostTarget
from launcher.workload.model import Ssh


class SshError(RuntimeError):
    """A node could not be reached; the message says which, why, and what to do. ``transient``: the
    network or the host may come back (not a key or permission problem)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class KeyCheck:
    """What the server presented against what known_hosts holds for it."""

    host: str
    port: int
    presented: str
    known: tuple[str, ...]
    public_line: str

    @property
    def known_hosts_name(self) -> str:
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    @property
    def target(self) -> str:
        return self.host if self.port == 22 else f"{self.host}:{self.port}"

    @property
    def changed(self) -> bool:
        return bool(self.known) and self.presented not in self.known


CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
           "aes256-ctr", "aes192-ctr", "aes128-ctr")
"""OpenSSH's default ciphers with AES-GCM first: asyncssh seals each ChaCha20-Poly1305 packet with
several cipher set-ups in Python, AES-GCM with one call, which a 16-node launch feels. A ``Ciphers``
line in ``~/.ssh/config`` wins."""


def _known_hosts_path(ssh: Ssh) -> Path:
    return Path(ssh.known_hosts).expanduser() if ssh.known_hosts else Path.home() / ".ssh" / "known_hosts"


def _known_hosts(path: Path):
    """The parsed file, read once while it is unchanged (a launch connects to every node with it);
    an empty list when there is no file yet (a fresh laptop): every key is then unknown, and said so."""
    import asyncssh

    try:
        stat = path.stat()
    except FileNotFoundError:
        return asyncssh.import_known_hosts("")
    return _parsed_known_hosts(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _parsed_known_hosts(path: Path, mtime_ns: int, size: int):
    import asyncssh

    return asyncssh.read_known_hosts(str(path))


def connect_options(host: HostTarget, ssh: Ssh) -> dict:
    """Options for ``asyncssh.connect``: the host's own user/port first, then the workload's ``ssh``."""
    options: dict = {
        "connect_timeout": ssh.connect_timeout_s,
        "keepalive_interval": ssh.keepalive_interval_s,
        "keepalive_count_max": ssh.keepalive_count_max,
        "known_hosts": _known_hosts(_known_hosts_path(ssh)),
    }
    if host.user or ssh.user:
        options["username"] = host.user or ssh.user
    if host.port or ssh.port:
        options["port"] = host.port or ssh.port
    if ssh.identity_file:
        options["client_keys"] = [str(Path(ssh.identity_file).expanduser())]
    if not resolve(host, ssh).sets_ciphers:
        options["encryption_algs"] = CIPHERS
    return options


async def connect(host: HostTarget, ssh: Ssh):
    """An open, host-key-verified connection, through ``proxy_jump`` (verified the same way) if set."""
    import asyncssh

    options = connect_options(host, ssh)
    try:
        if ssh.proxy_jump:
            from launcher.workload.hosts import parse_host

            jump = await connect(parse_host(ssh.proxy_jump), ssh.model_copy(update={"proxy_jump": None}))
            options["tunnel"] = jump
        return await asyncssh.connect(host.hostname, **options)
    except asyncssh.HostKeyNotVerifiable as err:
        raise SshError(await describe_key_problem(host, ssh, str(err))) from None
    except asyncssh.PermissionDenied:
        raise SshError(f"{host.display}: permission denied: check the user and key (ssh {host.display} "
                       "must work without a password)") from None
    except (asyncssh.Error, OSError, asyncio.TimeoutError) as err:
        reason = str(err) or type(err).__name__
        raise SshError(f"{host.display}: cannot connect: {reason}", transient=True) from None


async def check_host_key(host: HostTarget, ssh: Ssh) -> KeyCheck:
    """Fetch the server's key without trusting it, and what known_hosts says about this host."""
    import asyncssh

    resolved = await asyncio.to_thread(resolve, host, ssh)
    hostname, port = resolved.hostname, resolved.port
    tunnel = ()
    if ssh.proxy_jump:
        from launcher.workload.hosts import parse_host

        tunnel = await connect(parse_host(ssh.proxy_jump), ssh.model_copy(update={"proxy_jump": None}))
    try:
        key = await asyncio.wait_for(asyncssh.get_server_host_key(host.hostname, port, tunnel=tunnel),
                                     ssh.connect_timeout_s)
    finally:
        if tunnel:
            tunnel.close()
    if key is None:
        raise OSError(f"{host.display} presented no host key")
    known: tuple[str, ...] = ()
    path = _known_hosts_path(ssh)
    if path.exists():
        trusted = asyncssh.read_known_hosts(str(path)).match(hostname, "", port)[0]
        known = tuple(k.get_fingerprint("sha256") for k in trusted)
    return KeyCheck(hostname, port, key.get_fingerprint("sha256"), known,
                    key.export_public_key("openssh").decode().strip())


async def describe_key_problem(host: HostTarget, ssh: Ssh, detail: str) -> str:
    try:
        check = await check_host_key(host, ssh)
    except (OSError, asyncio.TimeoutError, asyncssh_errors()) as err:
        return f"{host.display}: host key not verifiable ({detail}); could not fetch it again: {err}"
    if check.changed:
        return (f"{host.display}: HOST KEY CHANGED: known_hosts has {', '.join(check.known)} but the server "
                f"presents {check.presented}. Nothing was run. If the machine was really reinstalled, remove "
                f"the old entry (ssh-keygen -R '{check.known_hosts_name}') and run: fsdp-tui trust {check.target}")
    return (f"{host.display}: unknown host key {check.presented}. Nothing was run. If that is the right "
            f"machine, trust it on purpose: fsdp-tui trust {check.target}")


def asyncssh_errors() -> type[Exception]:
    import asyncssh

    return asyncssh.Error


def trust(check: KeyCheck, ssh: Ssh) -> Path:
    """Append the key that ``check`` fetched to known_hosts; returns the file."""
    path = _known_hosts_path(ssh)
    _append_line(path, f"{check.known_hosts_name} {check.public_line}")
    return path


def _append_line(path: Path, line: str) -> None:
    """Append to known_hosts, making ``~/.ssh`` (0700) and the file (0600) as OpenSSH would."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="ascii") as f:
        f.write(line + "\n")
