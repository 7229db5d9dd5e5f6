"""Text from a node made safe to show: the one sanitizer between a node's bytes and anybody's terminal.

Everything a node sends is untrusted: its job's output, and every string of its agent's replies (an error
of its ``state.json``, a checkpoint's name, a path, a hostname). Shown raw it could retitle the user's
terminal (OSC 0/2), write the clipboard (OSC 52), reset the terminal (``ESC c``), or smuggle a sequence
through any of the other ESC forms. Job output is shown through :func:`sanitize_line` (the records keep its
bytes exactly); a reply's strings are made :func:`printable` once, where the reply enters
(:func:`clean_reply`), so no screen, command or record downstream has to remember.

:func:`sanitize_line` is a small VT parser with the states of the DEC ANSI parser
(vt100.net/emu/dec_ansi_parser): ground, escape, escape intermediate, CSI, and the control strings (OSC,
DCS, SOS, PM, APC) that run until BEL or ST. Regexes miss forms (OSC ended by ST, DCS, 8-bit C1
introducers); pyte, the VT library for Python, draws DCS/APC/PM/SOS payloads as text, so its parser is not
used. What passes: printable text, ``\\t``, and SGR colour sequences when ``keep_colour`` is set (as a fresh
``ESC [ ... m`` built from their parameters). Everything else is dropped.

A ``\\r`` inside a line is a redraw: a terminal ends up showing what came after it, so only the last
non-empty segment is kept (a progress bar written as ``10%\\r20%\\r30%`` shows as ``30%``).
"""

from __future__ import annotations

import re
from typing import TypeVar, cast

T = TypeVar("T")

MAX_LINE_CHARS = 16_384
"""A longer line is cut for display (the node log keeps all of it): a 10 MB line is not a line to read."""

_GROUND, _ESC, _ESC_INTER, _CSI, _STRING, _STRING_ESC = range(6)
_STRING_INTRODUCERS = "]PX^_"
"""After ESC: OSC, DCS, SOS, PM, APC: control strings that run until BEL or ST."""
_C1_STRINGS = "\x90\x98\x9d\x9e\x9f"
_C1_CSI = "\x9b"
_C1_ST = "\x9c"
_SGR_PARAMS = frozenset("0123456789;:")
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
_MAX_PARSED = 1 << 20


def sanitize_line(line: str, keep_colour: bool = False, cut: bool = True, line_chars: int | None = None) -> str:
    """One line of job output (no ``\\n``) as a terminal may safely show it; ``cut``: at ``MAX_LINE_CHARS``.
    ``line_chars``: the whole line's length when ``line`` is only its start (the note under a cut line
    counts the line, not the part read)."""
    total = len(line) if line_chars is None else line_chars
    if _CONTROLS.search(line) is None:
        return _cut(line, total) if cut else line
    if total > _MAX_PARSED:
        line = line[:_MAX_PARSED]
    segments: list[list[str]] = [[]]
    out = segments[0]
    state = _GROUND
    params: list[str] = []
    clean = True
    for ch in line:
        code = ord(ch)
        if state == _GROUND:
            if (code >= 0x20 and code != 0x7F and not 0x80 <= code <= 0x9F) or ch == "\t":
                out.append(ch)
            elif ch == "\r":
                if out:
                    out = []
                    segments.append(out)
            elif ch == "\x1b":
                state = _ESC
            elif ch == _C1_CSI:
                state, params, clean = _CSI, [], True
            elif ch in _C1_STRINGS:
                state = _STRING
        elif state in (_ESC, _STRING_ESC):
            if state == _STRING_ESC and ch == "\\":
                state = _GROUND
            elif ch == "[":
                state, params, clean = _CSI, [], True
            elif ch in _STRING_INTRODUCERS:
                state = _STRING
            elif ch == "\x1b":
                state = _ESC
            elif 0x20 <= code <= 0x2F:
                state = _ESC_INTER
            else:
                # A final byte (two-byte escapes such as RIS ``ESC c``, ``ESC 7``) or a stray control: dropped.
                state = _GROUND
        elif state == _ESC_INTER:
            if ch == "\x1b":
                state = _ESC
            elif not 0x20 <= code <= 0x2F:
                state = _GROUND
        elif state == _CSI:
            if 0x40 <= code <= 0x7E:
                if keep_colour and ch == "m" and clean:
                    out.append("\x1b[" + "".join(params) + "m")
                state = _GROUND
            elif ch == "\x1b":
                state = _ESC
            elif ch in ("\x18", "\x1a"):
                state = _GROUND
            else:
                params.append(ch)
                clean = clean and ch in _SGR_PARAMS and len(params) <= 64
        elif state == _STRING:
            if ch == "\x07" or ch == _C1_ST:
                state = _GROUND
            elif ch == "\x1b":
                state = _STRING_ESC
    while len(segments) > 1 and not _has_text(segments[-1]):
        segments.pop()
    shown = "".join(segments[-1])
    if cut:
        shown = _cut(shown, len(shown) + total - len(line))
    if keep_colour and "\x1b[" in shown:
        shown += "\x1b[0m"
    return shown


def _cut(shown: str, total: int) -> str:
    if total <= MAX_LINE_CHARS:
        return shown
    return f"{shown[:MAX_LINE_CHARS]} … ({total - MAX_LINE_CHARS:,} more characters in the node log)"


def _has_text(segment: list[str]) -> bool:
    return any(not piece.startswith("\x1b[") for piece in segment)


_INVISIBLE = re.compile("[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
"""Bidirectional overrides and line separators: not controls to a terminal, but they reorder or break what
is shown (a name could read as another)."""


def printable(text: object, newlines: bool = False) -> str:
    """A node's string as it may be shown anywhere: no control character but ``\\n`` (with ``newlines``),
    no escape sequence, no bidirectional override. A ``\\r`` or tab is shown as a space (in a name it
    could hide the text before it); anything not a string becomes its ``str``."""
    text = text if isinstance(text, str) else str(text)
    if _CONTROLS.search(text) is None and _INVISIBLE.search(text) is None:
        return text
    text = _INVISIBLE.sub("", text.replace("\r", " ").replace("\t", " "))
    return ("\n" if newlines else " ").join(sanitize_line(line, cut=False) for line in text.split("\n"))


def clean_reply(value: T) -> T:
    """A decoded JSON reply from a node with every string in it (keys too) made :func:`printable`, newlines
    kept: applied once where a reply enters, so nothing downstream sees a node's raw text."""
    if isinstance(value, str):
        return cast(T, printable(value, newlines=True))
    if isinstance(value, dict):
        return cast(T, {printable(k, newlines=True) if isinstance(k, str) else k: clean_reply(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(T, [clean_reply(v) for v in value])
    return value


MAX_CPU_PCT = 100.0 * 4096
"""More than 4,096 cores busy is no node's figure."""
MAX_RSS_MIB = float(1 << 30)
"""A PiB of resident memory is no node's figure."""
MAX_PROCESSES = 1 << 22
"""Linux's own ceiling on process ids."""


MAX_NET_MB = 1e12
"""An exabyte through one node's interfaces in one run is no node's figure."""


def network_figures(value: object) -> tuple[float, float] | None:
    """A node's ``usage`` reply's traffic since its job's first sample, ``(received MB, sent MB)``; ``None``
    when it has none, or not a figure a node can have."""
    if not isinstance(value, dict):
        return None
    got: list[float] = []
    for v in (value.get("net_rx_mb"), value.get("net_tx_mb")):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= MAX_NET_MB:
            return None
        got.append(float(v))
    return got[0], got[1]


def usage_figures(value: object) -> tuple[float, float, int, float] | None:
    """A node's ``usage`` reply as ``(cpu_pct, rss_mib, processes, sampled_at)``, or ``None`` when any of it
    is not a figure a node can have (text, a bool, NaN or infinity, negative, past the ceilings above) or
    there is no CPU figure yet (the node's first sample): a node's numbers are untrusted like its text, and
    a made-up figure shown beside real ones would point at the wrong node."""
    if not isinstance(value, dict):
        return None

    def number(key: str, ceiling: float) -> float | None:
        v = value.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        v = float(v)
        return v if 0.0 <= v <= ceiling else None  # NaN fails both comparisons

    cpu, rss, count = number("cpu_pct", MAX_CPU_PCT), number("rss_mib", MAX_RSS_MIB), value.get("processes")
    if cpu is None or rss is None or isinstance(count, bool) or not isinstance(count, int):
        return None
    if not 0 <= count <= MAX_PROCESSES:
        return None
    at = number("at", 1e11)
    return cpu, rss, count, at or 0.0
