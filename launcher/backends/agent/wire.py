"""Frames between the launcher and a node agent, both directions.

A frame is one line ``<header length> <body length>``, then the header (one JSON object) and the body
(raw bytes: a log chunk, a file's content). Requests carry ``op``; answers carry ``ok`` and, when not
ok, ``error`` in words a user can act on.
"""

from __future__ import annotations

import json

PROTOCOL = 2
"""Bumped whenever a request or answer changes shape; the agent says its version in its ready line."""
READY = "fsdp-tui agent ready"
MAX_HEADER = 1 << 20
MAX_BODY = 64 << 20


class FrameError(ValueError):
    """Bytes that are not a frame (a banner, a truncated channel)."""


def encode(header: dict, body: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return b"%d %d\n" % (len(head), len(body)) + head + body


def parse_sizes(line: bytes) -> tuple[int, int]:
    parts = line.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise FrameError(f"not a frame: {line[:200]!r}")
    n_head, n_body = int(parts[0]), int(parts[1])
    if n_head > MAX_HEADER or n_body > MAX_BODY:
        raise FrameError(f"frame too large: {n_head} + {n_body} B")
    return n_head, n_body


def decode_header(data: bytes) -> dict:
    header = json.loads(data.decode("utf-8"))
    if not isinstance(header, dict):
        raise FrameError("a frame's header must be a JSON object")
    return header


def read_frame(stream) -> tuple[dict, bytes] | None:
    """The next frame from a binary file object (the agent's stdin); ``None`` at its end."""
    line = stream.readline()
    if not line:
        return None
    n_head, n_body = parse_sizes(line)
    head = stream.read(n_head)
    body = stream.read(n_body) if n_body else b""
    if len(head) != n_head or len(body) != n_body:
        return None
    return decode_header(head), body


def ready_line(build: str) -> str:
    """What the agent prints once it serves: the protocol it speaks and the build it is."""
    return f"{READY} {PROTOCOL} {build}"
