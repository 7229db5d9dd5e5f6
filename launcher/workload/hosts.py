"""SSH targets as users write them: ``alias``, ``user@host``, ``host:port``, ``user@[::1]:2222``, ``localhost``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class HostTarget:
    """One node's SSH target. ``hostname`` may be an alias that ``~/.ssh/config`` resolves."""

    alias: str
    hostname: str
    user: str | None = None
    port: int | None = None

    @property
    def display(self) -> str:
        return self.alias

    @property
    def ssh_words(self) -> str:
        """How ``ssh`` is told to reach this target on a command line (``host:port`` is not ssh's syntax):
        ``ssh -p 2222 me@gpu-a`` (what the workload's ``ssh:`` section adds is not said)."""
        port = f"-p {self.port} " if self.port else ""
        user = f"{self.user}@" if self.user else ""
        return f"ssh {port}{user}{self.hostname}"

    @property
    def is_local(self) -> bool:
        """``localhost`` without a user or port means this machine, with no SSH."""
        return self.hostname in LOCAL_NAMES and self.user is None and self.port is None


def parse_host(text: str) -> HostTarget:
    """Parse one target; ``ValueError`` says what is wrong in words a user can act on."""
    raw = text
    if not text or text != text.strip():
        raise ValueError("a host may not be empty or have spaces around it")
    user = None
    if "@" in text:
        user, _, text = text.rpartition("@")
        if not _USER.match(user):
            raise ValueError(f"'{user}' is not a valid user name")
    port = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not host:
            raise ValueError("an IPv6 address is written [addr] or [addr]:port")
        if rest:
            if not rest.startswith(":"):
                raise ValueError("expected ':port' after ']'")
            port = _port(rest[1:])
        if not re.fullmatch(r"[0-9A-Fa-f:.]+", host):
            raise ValueError(f"'{host}' is not an IPv6 address")
    else:
        host, sep, port_text = text.partition(":")
        if sep:
            port = _port(port_text)
        if not _NAME.match(host) or host.startswith("-"):
            raise ValueError(f"'{host}' is not a valid host name or ~/.ssh/config alias")
    return HostTarget(alias=raw, hostname=host, user=user, port=port)


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"port '{text}' must be a number from 1 to 65535")
    return int(text)


def config_aliases(text: str) -> list[str]:
    """Names a ``~/.ssh/config`` text declares with ``Host`` (patterns with ``*``, ``?`` or ``!`` left
    out), in file order: what ``compute.hosts`` completes from."""
    out: list[str] = []
    for line in text.splitlines():
        words = line.strip().replace("=", " ", 1).split()
        if len(words) >= 2 and words[0].lower() == "host":
            out += [w for w in words[1:] if not any(c in w for c in "*?!") and w not in out]
    return out


def read_config_aliases(path: Path) -> list[str]:
    """:func:`config_aliases` of the file at ``path``; none when it cannot be read."""
    try:
        return config_aliases(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []
