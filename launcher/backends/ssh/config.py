"""The one reading of ``~/.ssh/config``: OpenSSH's own, through ``ssh -G``, for each host and each jump hop.

Users test an SSH tool against years of dotfiles (``Include``, ``Match exec``, tokens, agents,
certificates); a second parser always disagrees somewhere, and a disagreement misroutes silently. So
where an ``ssh`` client is installed, ``ssh -G`` says what ``ssh`` would do and asyncssh is driven from
those values with its own config reading off. Only where no ``ssh`` exists is asyncssh's parser used
(``fallback.py``). Either way one ``ResolvedHost`` feeds connecting, MASTER_ADDR, the doctor,
``--dry-run`` and ``trust``."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from pathlib import Path

from launcher.backends.ssh.common import (
    DEFAULT_PORT,
    ResolvedHost,
    SshConfigError,
    Tokens,
    _home_path,
    _passwd_home,
    agent_socket,
    local_user,
)
from launcher.paths import ssh_config_path
from launcher.workload.hosts import HostTarget
from launcher.workload.machines import Ssh

SSH_G_TIMEOUT_S = 30.0
"""``ssh -G`` runs the config's ``Match exec`` commands (``nc -z -w1 ...``): slow ones are the user's."""
CACHE_TTL_S = 5.0
"""A launch resolves every node several times in a few seconds; a config edited later is read anew."""


def config_path() -> Path:
    return ssh_config_path()


def ssh_binary() -> str | None:
    """OpenSSH's client, where installed: the reference reader of the config."""
    return shutil.which("ssh")


def resolve(host: HostTarget, ssh: Ssh, *, hop: bool = False) -> ResolvedHost:
    """``host`` as ``ssh`` would dial it: the target's own ``user@``/``:port`` first, then the workload's
    ``ssh.user``/``ssh.port``/``ssh.proxy_jump`` where set (given to ``ssh -G`` as ``-l``/``-p``/``-J``),
    then the config. ``hop``: a jump host, which gets nothing of the workload's (as ``ssh -J``).
    ``SshConfigError`` when the config cannot be read."""
    user = host.user or (None if hop else ssh.user)
    port = host.port or (None if hop else ssh.port)
    jump = None if hop else ssh.proxy_jump
    if host.hostname.startswith("-"):
        raise SshConfigError(f"'{host.hostname}' is not a host name")
    key = (host.hostname, user, port, jump, str(config_path()), _files_stamp(), int(time.monotonic() // CACHE_TTL_S))
    return _cached(key)


@functools.lru_cache(maxsize=512)
def _cached(key: tuple) -> ResolvedHost:
    name, user, port, jump = key[:4]
    binary = ssh_binary()
    if binary is None:
        from launcher.backends.ssh.fallback import resolve_with_asyncssh

        return resolve_with_asyncssh(name, user, port, jump, Path(key[4]))
    return _resolve_openssh(binary, name, user, port, jump)


def _files_stamp() -> tuple:
    """Modification times and sizes of the files a config usually spreads over (``~/.ssh`` and its
    folders, ``/etc/ssh``), so an edit there, an ``Include``d file's too, is read at once; an ``Include``
    from elsewhere is read again within ``CACHE_TTL_S``."""
    stamps = []
    for folder, depth in ((config_path().parent, 2), (Path("/etc/ssh"), 1)):
        stamps += _stamps(folder, depth)
    return tuple(stamps)


def _stamps(folder: Path, depth: int) -> list[tuple]:
    found = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_file():
                    stat = entry.stat()
                    found.append((entry.path, stat.st_mtime_ns, stat.st_size))
                elif depth > 1 and entry.is_dir(follow_symlinks=False):
                    found += _stamps(Path(entry.path), depth - 1)
    except OSError:
        pass
    return sorted(found)


def _ssh_g(binary: str, name: str, user: str | None, port: int | None, jump: str | None) -> dict[str, list[str]]:
    """``ssh -G``'s answer as {option: [values...]} (repeated options keep every value)."""
    args = [binary, "-G"]
    home = str(Path.home())
    if os.path.realpath(home) != os.path.realpath(_passwd_home()):
        # ssh finds ~ from the passwd entry; fsdp-tui (and asyncssh) from $HOME: read $HOME's config.
        args += ["-F", str(config_path()) if config_path().is_file() else "none"]
    if user:
        args += ["-l", user]
    if port:
        args += ["-p", str(port)]
    if jump:
        args += ["-J", jump]
    try:
        done = subprocess.run([*args, "--", name], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=SSH_G_TIMEOUT_S, env={**os.environ, "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        raise SshConfigError(f"`ssh -G {name}` gave no answer within {SSH_G_TIMEOUT_S:g} s: a `Match exec` "
                             f"command in {config_path()} hangs; make it return quickly") from None
    except OSError as err:
        raise SshConfigError(f"{binary} does not run ({err}): reinstall openssh-client") from None
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip() and "Pseudo-terminal" not in ln]
        first = lines[0] if lines else f"exit status {done.returncode}"
        raise SshConfigError(f"{first}: fix that line (`ssh -G {name}` shows the same error)")
    return _options(done.stdout)


def _options(text: str) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        option, _, value = line.partition(" ")
        values.setdefault(option.lower(), []).append(value)
    return values


@functools.lru_cache(maxsize=4)
def _openssh_defaults(binary: str) -> dict[str, list[str]]:
    """What ``ssh -G`` says with no config at all: a config's algorithm list is ours to follow only
    where it differs from these."""
    done = subprocess.run([binary, "-G", "-F", "none", "--", "defaults.invalid"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=SSH_G_TIMEOUT_S)
    return _options(done.stdout)


def _float_or_none(values: list[str] | None) -> float | None:
    if not values or values[0] in ("none", "0"):
        return None
    try:
        return float(values[0])
    except ValueError:
        return None


def _resolve_openssh(binary: str, name: str, user: str | None, port: int | None, jump: str | None) -> ResolvedHost:
    g = _ssh_g(binary, name, user, port, jump)
    defaults = _openssh_defaults(binary)

    def one(option: str) -> str | None:
        return g[option][0] if option in g else None

    tokens = Tokens(name, one("hostname") or name, int(one("port") or DEFAULT_PORT), one("user") or local_user(),
                    one("hostkeyalias"))
    identities = [tokens.expand(p) for p in g.get("identityfile", [])]
    known = tuple(_home_path(tokens.expand(p)) for p in " ".join(g.get("userknownhostsfile", [])).split())
    globals_ = tuple(tokens.expand(p) for p in " ".join(g.get("globalknownhostsfile", [])).split())

    def algs(option: str) -> tuple[str, ...] | None:
        return tuple(g[option][0].split(",")) if g.get(option) != defaults.get(option) and option in g else None

    command = one("proxycommand")
    interval = _float_or_none(g.get("serveraliveinterval"))
    return ResolvedHost(
        name=name, hostname=tokens.hostname, port=tokens.port, user=tokens.user,
        identity_files=tuple(p for p in identities if Path(p).is_file()),
        missing_identity_files=tuple(p for p in identities if not Path(p).is_file()),
        identities_only=one("identitiesonly") == "yes",
        certificate_files=tuple(tokens.expand(p) for p in g.get("certificatefile", [])),
        identity_agent=agent_socket(one("identityagent"), tokens),
        proxy_jump=one("proxyjump") if one("proxyjump") not in (None, "none") else None,
        proxy_command=tokens.expand(command, path=False) if command and command != "none" else None,
        user_known_hosts=known, global_known_hosts=globals_, host_key_alias=one("hostkeyalias"),
        server_alive_interval_s=interval,
        server_alive_count_max=int(one("serveralivecountmax") or 3) if interval else None,
        connect_timeout_s=_float_or_none(g.get("connecttimeout")),
        ciphers=algs("ciphers"), kex_algs=algs("kexalgorithms"), macs=algs("macs"),
        host_key_algs=algs("hostkeyalgorithms"),
        strict_host_key_checking=one("stricthostkeychecking") or "ask", source="ssh -G")
