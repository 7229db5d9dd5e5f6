"""SSH targets as users write them: ``alias``, ``user@host``, ``host:port``, ``user@[::1]:2222``, ``localhost``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
"""Matched whole (``fullmatch``): ``$`` would let a name end in a newline."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
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
    refuse_control(text, "a host")
    if not text or text != text.strip():
        raise ValueError("a host may not be empty or have spaces around it")
    if text.startswith("-"):
        raise ValueError(f"'{text}' is not a valid host name or ~/.ssh/config alias: it starts with '-' and "
                         "would be read as an ssh option")
    user = None
    if "@" in text:
        user, _, text = text.rpartition("@")
        check_user(user)
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
        if not _NAME.fullmatch(host) or host.startswith("-"):
            raise ValueError(f"'{host}' is not a valid host name or ~/.ssh/config alias")
    return HostTarget(alias=raw, hostname=host, user=user, port=port)


def _port(text: str) -> int:
    # ASCII digits only: str.isdigit() and int() also take other scripts' digits ('٢٢' would be port 22).
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise ValueError(f"port '{text}' must be a number from 1 to 65535 (digits 0-9)")
    return int(text)


def refuse_control(text: str, what: str) -> None:
    """``ValueError`` when ``text`` holds a control character (a newline, a NUL, an escape): SSH settings
    and host names are one line of printable text."""
    bad = _CONTROL.search(text)
    if bad:
        raise ValueError(f"{what} may not hold a control character ({bad.group()!r} at position {bad.start() + 1})")


def check_user(user: str) -> None:
    """``ValueError`` unless ``user`` is a login name that cannot be read as an option or hold a control
    character: letters, digits, ``_``, ``.`` and ``-``, not starting with ``-`` or ``.``."""
    refuse_control(user, "a user name")
    if not _USER.fullmatch(user):
        raise ValueError(f"'{user}' is not a valid user name (letters, digits, '_', '.' and '-', not starting "
                         "with '-' or '.')")


def check_jump(text: str) -> None:
    """``ValueError`` unless ``text`` is ``none`` or jump hosts as ``ssh -J`` takes them (``host``,
    ``user@host:port``, separated by commas), each a host :func:`parse_host` accepts."""
    if text == "none":
        return
    refuse_control(text, "a jump host")
    for hop in text.split(","):
        parse_host(hop)


def check_option_value(text: str, what: str) -> None:
    """``ValueError`` when ``text`` (a path or address given to SSH) could be read as an option or spans
    lines."""
    refuse_control(text, what)
    if text.startswith("-"):
        raise ValueError(f"{what} '{text}' starts with '-': it would be read as an option")


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
