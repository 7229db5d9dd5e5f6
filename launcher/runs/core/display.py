"""Job output made safe to show: the one sanitizer between a node's bytes and anybody's terminal.

A job's output is untrusted. Shown raw it could retitle the user's terminal (OSC 0/2), write the clipboard
(OSC 52), reset the terminal (``ESC c``), or smuggle a sequence through any of the other ESC forms. The records
keep the node's bytes exactly; only what is *shown* (``run --watch``, ``logs``, the app's node panes) goes
through :func:`sanitize_line`.

It is a small VT parser with the states of the DEC ANSI parser (vt100.net/emu/dec_ansi_parser): ground, escape,
escape intermediate, CSI, and the control strings (OSC, DCS, SOS, PM, APC) that run until BEL or ST. Regexes miss
forms (OSC ended by ST, DCS, 8-bit C1 introducers); pyte, the VT library for Python, draws DCS/APC/PM/SOS
payloads as text, so its parser is not used. What passes: printable text, ``\\t``, and SGR colour sequences
when ``keep_colour`` is set (as a fresh ``ESC [ ... m`` built from their parameters). Everything else is dropped.

A ``\\r`` inside a line is a redraw: a terminal ends up showing what came after it, so only the last non-empty
segment is kept (a progress bar written as ``10%\\r20%\\r30%`` shows as ``30%``).
"""

from __future__ import annotations

import re

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


def sanitize_line(line: str, keep_colour: bool = False) -> str:
    """One line of job output (no ``\\n``) as a terminal may safely show it."""
    if _CONTROLS.search(line) is None:
        return _cut(line, len(line))
    total = len(line)
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


def sanitize_lines(lines: list[str], keep_colour: bool = False) -> list[str]:
    return [sanitize_line(line, keep_colour) for line in lines]


_CONTROLS_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def show_lines(raw: list[bytes], keep_colour: bool = False) -> list[str]:
    """Complete lines of job output (bytes, no ``\n``) as :func:`sanitize_line` shows them; a batch with no
    control character at all (the usual case) is decoded and checked once instead of line by line."""
    if not raw:
        return []
    text = b"\n".join(raw).decode("utf-8", "replace")  # "\n" is never inside a UTF-8 sequence: same decode
    lines = text.split("\n")
    if _CONTROLS_BUT_NEWLINE.search(text) is None:
        if len(text) <= MAX_LINE_CHARS or max(map(len, lines)) <= MAX_LINE_CHARS:
            return lines
        return [_cut(line, len(line)) for line in lines]
    return [sanitize_line(line, keep_colour) for line in lines]
