"""Host keys where the user keeps them: the config's ``UserKnownHostsFile`` and ``GlobalKnownHostsFile``
(or the workload's ``ssh.known_hosts``), looked up and written under the ``HostKeyAlias`` when one is set,
as OpenSSH does, so that ``ssh`` and fsdp-tui trust exactly the same machines."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from launcher.backends.ssh.config import ResolvedHost, SshConfigError
from launcher.workload.machines import Ssh


@dataclass(frozen=True)
class KeyCheck:
    """What the server presented against what the known-hosts files hold for it."""

    host: str
    """The name the key is filed under: the ``HostKeyAlias``, else the address dialled."""
    port: int
    presented: str
    known: tuple[str, ...]
    public_line: str
    key_name: str = ""
    """``host``, ``[host]:port`` or the alias: the first field of a known_hosts line."""
    file: str = ""
    """Where ``trust`` writes: the first user known-hosts file."""
    revoked: bool = False

    @property
    def known_hosts_name(self) -> str:
        if self.key_name:
            return self.key_name
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    @property
    def target(self) -> str:
        return self.host if self.port == 22 else f"{self.host}:{self.port}"

    @property
    def changed(self) -> bool:
        return bool(self.known) and self.presented not in self.known


def user_files(resolved: ResolvedHost, ssh: Ssh) -> tuple[Path, ...]:
    """The workload's ``ssh.known_hosts`` where set, else the config's ``UserKnownHostsFile`` list."""
    if ssh.known_hosts:
        return (Path(ssh.known_hosts).expanduser(),)
    return tuple(Path(p) for p in resolved.user_known_hosts) or (Path.home() / ".ssh" / "known_hosts",)


def all_files(resolved: ResolvedHost, ssh: Ssh) -> tuple[Path, ...]:
    return (*user_files(resolved, ssh), *(Path(p) for p in resolved.global_known_hosts))


def _lookup(resolved: ResolvedHost) -> tuple[str, int | None]:
    """(name, port) to match: the alias alone (OpenSSH ignores the port then), else ``host`` or
    ``[host]:port`` as one name: asyncssh's port argument would fall back to the port-less entry, which
    OpenSSH never does (another sshd on that machine would pass for this one)."""
    if resolved.host_key_alias:
        return resolved.host_key_alias, None
    return resolved.key_name, None


def trusted(resolved: ResolvedHost, ssh: Ssh) -> tuple:
    """The matched (host keys, CA keys, revoked keys, ...) lists for asyncssh's ``known_hosts``: one
    lookup over every file, under the alias when set. Empty lists (every key unknown) when no file exists."""
    name, port = _lookup(resolved)
    lists: list[list] | None = None
    for path in all_files(resolved, ssh):
        parsed = _known_hosts(path)
        if parsed is None:
            continue
        found = parsed.match(name, "", port)
        lists = [list(x) for x in found] if lists is None else [a + list(b) for a, b in zip(lists, found, strict=True)]
    return tuple(lists) if lists is not None else ([], [], [])


def _known_hosts(path: Path):
    """The parsed file, read once while it is unchanged (a launch connects to every node with it)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    return _parsed(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _parsed(path: Path, mtime_ns: int, size: int):
    import asyncssh

    try:
        return asyncssh.read_known_hosts(str(path))
    except (ValueError, UnicodeDecodeError) as err:
        raise SshConfigError(f"{path}: {err}: fix or remove that entry (ssh-keygen -l -f {path} lists the "
                             "file's keys)") from None


def key_check(resolved: ResolvedHost, ssh: Ssh, key) -> KeyCheck:
    """``key`` (what the server presented) against the files: known, unknown, CHANGED or revoked."""
    host_keys, _ca, revoked = trusted(resolved, ssh)[:3]
    presented = key.get_fingerprint("sha256")
    return KeyCheck(resolved.host_key_alias or resolved.hostname, resolved.port, presented,
                    tuple(k.get_fingerprint("sha256") for k in host_keys),
                    key.export_public_key("openssh").decode().strip(), key_name=resolved.key_name,
                    file=str(user_files(resolved, ssh)[0]),
                    revoked=any(k.get_fingerprint("sha256") == presented for k in revoked))


def trust(check: KeyCheck) -> Path:
    """Append the key that ``check`` fetched to the first user known-hosts file; returns the file."""
    path = Path(check.file) if check.file else Path.home() / ".ssh" / "known_hosts"
    _append_line(path, f"{check.known_hosts_name} {check.public_line}")
    return path


def _append_line(path: Path, line: str) -> None:
    """Append to known_hosts, making ``~/.ssh`` (0700) and the file (0600) as OpenSSH would."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="ascii") as f:
        f.write(line + "\n")
