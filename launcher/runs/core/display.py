"""Job output made safe to show: the one sanitizer between a node's bytes and anybody's terminal.

A job's output is untrusted. Shown raw it could retitle the user's terminal (OSC 0/2), write the clipboard
(OSC 52), reset the terminal (``ESC c``), or smuggle a sequence through any of the other ESC forms. The records
keep the node's bytes exactly; only what is *shown* (``run --watch``, ``logs``, the app's node panes) goes
through :func:`sanitize_line`
(:mod:`launcher.untrusted`, where the parser lives: the backends clean a node's replies with it too).
"""

from __future__ import annotations

import re

from launcher.untrusted import MAX_LINE_CHARS, _cut, sanitize_line

__all__ = ["MAX_LINE_CHARS", "sanitize_line", "sanitize_lines", "show_lines"]


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
