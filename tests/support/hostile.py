"""Hostile strings: a corpus of job output with every control form a job could use to reach the user's terminal,
and values (env, parameters, paths) full of shell and YAML syntax that must arrive byte for byte and run nothing."""

from __future__ import annotations

ESC = b"\x1b"
CORPUS: list[tuple[str, bytes]] = [
    ("osc title ended by ST", ESC + b"]2;PWNED" + ESC + b"\\"),
    ("osc title ended by BEL", ESC + b"]0;PWNED\x07"),
    ("osc 52 clipboard", ESC + b"]52;c;UFdORUQ=\x07"),
    ("osc 8-bit introducer", "\x9d2;PWNED\x9c".encode()),
    ("dcs", ESC + b"Pq#0;2;0;0;0#1!14@" + ESC + b"\\"),
    ("apc", ESC + b"_Gf=24;PWNED" + ESC + b"\\"),
    ("pm", ESC + b"^PWNED" + ESC + b"\\"),
    ("sos", ESC + b"XPWNED" + ESC + b"\\"),
    ("ris", ESC + b"c"),
    ("decsc decrc deckpam", ESC + b"7" + ESC + b"8" + ESC + b"="),
    ("charset", ESC + b"(0"),
    ("c1 csi", "\x9b2J".encode()),
    ("clear screen", ESC + b"[2J" + ESC + b"[H"),
    ("cursor up", ESC + b"[10A"),
    ("private mode", ESC + b"[?1049h"),
    ("c0", b"\x07\x08\x00\x0b\x0c\x0e\x0f\x7f"),
    ("unterminated osc", ESC + b"]2;PWNED"),
]
SAFE_TEXT = "ok"
HOSTILE = [
    "it's", 'say "hi"', "$(touch PWNED)", "`touch PWNED`", "; touch PWNED", "a && touch PWNED", "|| true",
    "line1\nline2", "\ttab", "-rf", "--help", "-", "$HOME", "${PATH}", "%s%n", "\\", "\\n", "'", '"', "*",
    "?", "[abc]", "~", "!!", "#comment", "a=b", "üñíçødé", "🚀", "x" * 4000, " leading", "trailing ",
    "", "null", "true", "0", "1e5", "{a: b}", "[1, 2]", "&anchor", "*alias", "| block", "> folded",
    "<(cat /etc/passwd)", "$((1+1))", "\x1b[31mred", "back\\slash", "semi;colon", "new\r\nline", "--",
]
"""Strings a shell or YAML would read as syntax (quotes, substitutions, operators, escapes, anchors, a long
word, control characters): a value that crosses a boundary must arrive as itself."""


def hostile_log() -> bytes:
    """Every corpus entry wrapped in text on a line of its own, plus progress bars, invalid UTF-8, colour."""
    lines = [b"start " + seq + SAFE_TEXT.encode() + b" end" for _, seq in CORPUS]
    lines.append(b"progress 10%\rprogress 20%\rprogress 30%\r")
    lines.append(b"bad utf8 \xff\xfe\xc3 here")
    lines.append(ESC + b"[31mred" + ESC + b"[0m plain")
    return b"\n".join(lines) + b"\n"


def reached_terminal_safely(shown: str, keep_colour: bool = False) -> bool:
    """No control character but tab and newline; with colours, ESC only as an SGR ``ESC [ digits m``."""
    import re

    if keep_colour:
        shown = re.sub(r"\x1b\[[0-9;:]*m", "", shown)
    return not any((ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F for c in shown)
