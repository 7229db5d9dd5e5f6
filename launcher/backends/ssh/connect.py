"""SSH connections to nodes with asyncssh, driven from OpenSSH's reading of the config (``config.py``):
asyncssh's own config reading is off, so there is one reading. Host keys always verified against the
files the config names (``hostkeys.py``); every jump hop is connected explicitly, with the same
keepalives, timeouts and known-hosts files as the target.

Precedence: a value in the workload's ``ssh:`` wins over the config only where the workload sets it;
otherwise the config's ``ConnectTimeout``/``ServerAlive*`` apply, then the workload's defaults."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from launcher.backends.ssh.config import ResolvedHost, SshConfigError, resolve
from launcher.backends.ssh.hostkeys import KeyCheck, key_check, trusted
from launcher.backends.ssh.hostkeys import trust as _trust
from launcher.workload.hosts import HostTarget, parse_host
from launcher.workload.machines import Ssh

__all__ = ["CIPHERS", "KeyCheck", "SshError", "check_host_key", "connect", "connect_options", "trust"]

MAX_JUMPS = 8
"""A ``ProxyJump`` chain longer than this is a loop in the config (a hop that jumps through itself)."""


class SshError(RuntimeError):
    """A node could not be reached; the message says which, why, and what to do. ``transient``: the
    network or the host may come back (not a key, config or permission problem)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
           "aes256-ctr", "aes192-ctr", "aes128-ctr")
"""OpenSSH's default ciphers with AES-GCM first: asyncssh seals each ChaCha20-Poly1305 packet with
several cipher set-ups in Python, AES-GCM with one call, which a 16-node launch feels. A ``Ciphers``
line in ``~/.ssh/config`` wins."""


def effective_timeouts(resolved: ResolvedHost, ssh: Ssh) -> tuple[float, float, int]:
    """(connect timeout, keepalive interval, keepalive count): the workload's where it sets them, else the
    config's ``ConnectTimeout``/``ServerAliveInterval``/``ServerAliveCountMax``, else the workload's defaults."""
    given = ssh.model_fields_set
    timeout = ssh.connect_timeout_s
    if "connect_timeout_s" not in given and resolved.connect_timeout_s:
        timeout = resolved.connect_timeout_s
    interval, count = ssh.keepalive_interval_s, ssh.keepalive_count_max
    if resolved.server_alive_interval_s:
        if "keepalive_interval_s" not in given:
            interval = resolved.server_alive_interval_s
        if "keepalive_count_max" not in given and resolved.server_alive_count_max:
            count = resolved.server_alive_count_max
    return timeout, interval, count


def _supported(kind: str, wanted: tuple[str, ...] | None, resolved: ResolvedHost, option: str) -> str | None:
    """The config's algorithm list, as asyncssh takes it (``+``/``-``/``^`` kept), cut to what asyncssh
    implements; ``SshConfigError`` when it implements none of them."""
    if wanted is None:
        return None
    from asyncssh import encryption, kex, mac, public_key

    if any(w.startswith(("+", "-", "^")) for w in wanted):
        return ",".join(wanted)
    known = {a.decode() for a in {"enc": encryption.get_encryption_algs, "kex": kex.get_kex_algs,
                                  "mac": mac.get_mac_algs, "key": public_key.get_public_key_algs}[kind]()}
    usable = [w for w in wanted if w in known]
    if not usable:
        raise SshConfigError(f"{resolved.name}: none of the config's {option} ({','.join(wanted)}) is "
                             f"implemented by asyncssh: add one of {', '.join(sorted(known)[:6])}, ...")
    return ",".join(usable)


def connect_options(resolved: ResolvedHost, ssh: Ssh) -> dict:
    """Options for ``asyncssh.connect`` from one resolution, asyncssh's config reading off."""
    timeout, interval, count = effective_timeouts(resolved, ssh)
    keys = [str(Path(ssh.identity_file).expanduser())] if ssh.identity_file else list(resolved.identity_files)
    options: dict = {
        "config": [], "port": resolved.port, "username": resolved.user, "connect_timeout": timeout,
        "keepalive_interval": interval, "keepalive_count_max": count, "known_hosts": trusted(resolved, ssh),
        "client_keys": keys, "ignore_encrypted": True, "agent_path": resolved.identity_agent or "",
        "encryption_algs": _supported("enc", resolved.ciphers, resolved, "Ciphers") or ",".join(CIPHERS),
    }
    certs = [c for c in resolved.certificate_files if Path(c).is_file()]
    if certs:
        options["client_certs"] = certs
    if resolved.identities_only:
        # The agent offers only the keys named in the config (their .pub or certificate beside them).
        named = [p for k in keys for p in (k + ".pub", k + "-cert.pub") if Path(p).is_file()] + certs
        if named:
            options["agent_identities"] = named
        else:
            options["agent_path"] = ""
    for kind, wanted, option, name in (("kex", resolved.kex_algs, "KexAlgorithms", "kex_algs"),
                                       ("mac", resolved.macs, "MACs", "mac_algs"),
                                       ("key", resolved.host_key_algs, "HostKeyAlgorithms", "server_host_key_algs")):
        chosen = _supported(kind, wanted, resolved, option)
        if chosen:
            options[name] = chosen
    if resolved.proxy_command and not resolved.jump_hops:
        options["proxy_command"] = resolved.proxy_command
    return options


def parse_jump(spec: str) -> HostTarget:
    """One ``ProxyJump`` hop: ``[user@]host[:port]`` or ``ssh://[user@]host[:port]``."""
    text = spec.strip().removeprefix("ssh://")
    try:
        return parse_host(text)
    except ValueError as err:
        raise SshConfigError(f"ProxyJump hop '{spec}': {err}") from None


async def _resolve(host: HostTarget, ssh: Ssh, *, hop: bool = False) -> ResolvedHost:
    try:
        return await asyncio.to_thread(resolve, host, ssh, hop=hop)
    except SshConfigError as err:
        raise SshError(f"{host.display}: {err}") from None


async def connect(host: HostTarget, ssh: Ssh):
    """An open, host-key-verified connection, through every jump hop (each verified the same way)."""
    resolved = await _resolve(host, ssh)
    return await _open(resolved, ssh, host.display, 0, host.display)


async def _chain(resolved: ResolvedHost, ssh: Ssh, label: str, depth: int) -> list:
    """Open connections to each jump hop, the first one with its own config (its own jumps too), each
    next one through the one before, as ``ssh -J a,b`` does. Returns them, nearest the target last."""
    if depth > MAX_JUMPS:
        raise SshError(f"{label}: ProxyJump goes through more than {MAX_JUMPS} hops: a hop jumps through "
                       "itself in the config; fix its ProxyJump")
    chain: list = []
    try:
        for i, spec in enumerate(resolved.jump_hops):
            try:
                target = parse_jump(spec)  # ssh -G's spelling ([addr]:port), said back as user@host:port
            except SshConfigError as err:
                raise SshError(f"{label}: {err}") from None
            address = f"[{target.hostname}]" if ":" in target.hostname else target.hostname
            spec = (f"{target.user}@" if target.user else "") + address + (f":{target.port}" if target.port else "")
            hop = await _resolve(target, ssh, hop=True)
            hop_label = f"{label} (via jump host {spec})"
            if i == 0:
                chain.append(await _open(hop, ssh, hop_label, depth + 1, spec))
            else:
                chain.append(await _dial(replace(hop, proxy_jump=None, proxy_command=None), ssh, hop_label,
                                         chain[-1], spec))
    except BaseException:
        for conn in chain:
            conn.close()
        raise
    return chain


_closers: set[asyncio.Task] = set()


async def _open(resolved: ResolvedHost, ssh: Ssh, label: str, depth: int, name: str):
    chain = await _chain(resolved, ssh, label, depth)
    try:
        conn = await _dial(resolved, ssh, label, chain[-1] if chain else None, name)
    except BaseException:
        for hop in chain:
            hop.close()
        raise
    if chain:
        async def close_hops() -> None:
            await conn.wait_closed()
            for hop in reversed(chain):
                hop.close()
        task = asyncio.get_running_loop().create_task(close_hops())
        _closers.add(task)
        task.add_done_callback(_closers.discard)
    return conn


async def _dial(resolved: ResolvedHost, ssh: Ssh, label: str, tunnel, name: str):
    """One connection (through ``tunnel``); ``name``: what ``fsdp-tui trust`` is told to resolve."""
    import asyncssh

    try:
        options = connect_options(resolved, ssh)
    except SshConfigError as err:
        raise SshError(f"{label}: {err}") from None
    try:
        return await asyncssh.connect(resolved.hostname, tunnel=tunnel or (), **options)
    except asyncssh.HostKeyNotVerifiable as err:
        raise SshError(await _describe(resolved, ssh, label, tunnel, name, str(err))) from None
    except asyncssh.PermissionDenied:
        raise SshError(f"{label}: permission denied for {resolved.user}@{resolved.hostname}:{resolved.port}: "
                       f"check the user and key (ssh {resolved.name} must work without a password)") from None
    except (asyncssh.Error, OSError, asyncio.TimeoutError, ValueError) as err:
        reason = str(err) or type(err).__name__
        raise SshError(f"{label}: cannot connect: {reason} (dialling {resolved.hostname}:{resolved.port})",
                       transient=not isinstance(err, ValueError)) from None


async def _fetch_check(resolved: ResolvedHost, ssh: Ssh, tunnel) -> KeyCheck:
    """The server's key, fetched without trusting it, against the known-hosts files."""
    import asyncssh

    timeout = effective_timeouts(resolved, ssh)[0]
    key = await asyncio.wait_for(asyncssh.get_server_host_key(
        resolved.hostname, resolved.port, tunnel=tunnel or (), config=[],
        proxy_command=resolved.proxy_command if not tunnel and resolved.proxy_command else ()), timeout)
    if key is None:
        raise OSError(f"{resolved.name} presented no host key")
    return key_check(resolved, ssh, key)


async def _describe(resolved: ResolvedHost, ssh: Ssh, label: str, tunnel, name: str, detail: str) -> str:
    try:
        check = await _fetch_check(resolved, ssh, tunnel)
    except (OSError, asyncio.TimeoutError, SshConfigError, asyncssh_errors()) as err:
        return f"{label}: host key not verifiable ({detail}); could not fetch it again: {err}"
    return describe(label, check, name)


def describe(label: str, check: KeyCheck, name: str) -> str:
    """One line: an unknown, revoked or CHANGED key, and what to do (``fsdp-tui trust name``)."""
    if check.revoked:
        return (f"{label}: host key {check.presented} is marked @revoked in {check.file}. Nothing was run. "
                "Ask the machine's administrator for its new key")
    if check.changed:
        return (f"{label}: HOST KEY CHANGED: known_hosts has {', '.join(check.known)} for {check.known_hosts_name} "
                f"but the server presents {check.presented}. Nothing was run. If the machine was really "
                f"reinstalled, remove the old entry (ssh-keygen -R '{check.known_hosts_name}' -f {check.file}) "
                f"and run: fsdp-tui trust {name}")
    return (f"{label}: unknown host key {check.presented} for {check.known_hosts_name}. Nothing was run. If "
            f"that is the right machine, trust it on purpose: fsdp-tui trust {name}")


async def check_host_key(host: HostTarget, ssh: Ssh) -> KeyCheck:
    """Fetch the server's key without trusting it (through its jump hops, which are verified), and what
    the known-hosts files say about it under the name OpenSSH looks up."""
    resolved = await _resolve(host, ssh)
    chain = await _chain(resolved, ssh, host.display, 0)
    try:
        return await _fetch_check(resolved, ssh, chain[-1] if chain else None)
    finally:
        for conn in reversed(chain):
            conn.close()


def asyncssh_errors() -> type[Exception]:
    import asyncssh

    return asyncssh.Error


def trust(check: KeyCheck, ssh: Ssh | None = None) -> Path:
    """Append the key that ``check`` fetched to the first user known-hosts file (the workload's
    ``ssh.known_hosts`` or the config's ``UserKnownHostsFile``); returns the file."""
    return _trust(check)
