"""Byte streams -> lines and metrics: partial lines kept, output made safe to show, progress lines parsed."""

from __future__ import annotations

import re
from typing import BinaryIO

from launcher.runs.core.display import sanitize_line, show_lines
from trainer.wire.protocol import MetricRecord

MAX_PENDING_BYTES = 1 << 20
"""A partial line longer than this keeps only its start (what display shows) and counts the rest until its
end: a job that never ends its line must not grow a follower without bound."""
LONG_HEAD_BYTES = 64 << 10
_FLOAT_GROUPS = ("loss", "lr", "eval_loss", "tokens_per_s", "grad_norm", "epoch")


class LineSplitter:
    """Feed bytes as they arrive; get back complete lines, sanitised for display
    (:func:`~launcher.runs.core.display.sanitize_line`). A partial last line waits for its end."""

    def __init__(self, keep_colour: bool = False) -> None:
        self.rest = b""
        self.keep_colour = keep_colour
        self.long_head: bytes | None = None
        """The start of an over-long line still arriving (its bytes past it are counted, not kept)."""
        self.long_chars = 0

    def feed(self, chunk: bytes) -> list[str]:
        lines: list[str] = []
        if self.long_head is not None:
            end = chunk.find(b"\n")
            self.long_chars += _chars(chunk if end < 0 else chunk[:end])
            if end < 0:
                return []
            lines.append(self._show_long())
            chunk = chunk[end + 1:]
        data = self.rest + chunk
        *complete, self.rest = data.split(b"\n")
        lines += show_lines(complete, self.keep_colour)
        if b"\r" in chunk:  # a redraw: only its last segment can ever be shown, the rest need not wait
            redraw = self.rest.rfind(b"\r", 0, len(self.rest.rstrip(b"\r")))
            if redraw > 0:
                self.rest = self.rest[redraw:]
        if len(self.rest) > MAX_PENDING_BYTES:
            self.long_head, self.long_chars, self.rest = self.rest[:LONG_HEAD_BYTES], _chars(self.rest), b""
        return lines

    def flush(self) -> list[str]:
        if self.long_head is not None:
            return [self._show_long()]
        rest, self.rest = self.rest, b""
        return [self._show(rest)] if rest else []

    def _show_long(self) -> str:
        head, self.long_head = self.long_head or b"", None
        return sanitize_line(head.decode("utf-8", "replace"), self.keep_colour, line_chars=self.long_chars)

    def _show(self, line: bytes) -> str:
        return sanitize_line(line.decode("utf-8", "replace"), self.keep_colour)


def _chars(data: bytes) -> int:
    """Characters of ``data`` as shown (decoded as the display decodes it)."""
    return len(data) if data.isascii() else len(data.decode("utf-8", "replace"))


class LogMetrics:
    """Metrics from progress lines of scripts that do not write the reporter file (``metrics.pattern``)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = re.compile(pattern)

    def parse(self, line: str) -> MetricRecord | None:
        match = self.pattern.search(line)
        if match is None:
            return None
        groups = match.groupdict()
        try:
            step = int(groups["step"])
        except (KeyError, TypeError, ValueError):
            return None
        fields = {}
        for name in _FLOAT_GROUPS:
            if groups.get(name) is not None:
                try:
                    fields[name] = float(groups[name])
                except ValueError:
                    continue
        max_steps = int(groups["max_steps"]) if groups.get("max_steps") else None
        kind = "eval" if "eval_loss" in fields and "loss" not in fields else "train"
        return MetricRecord(step=step, kind=kind, max_steps=max_steps, **fields)


TAIL_BLOCK = 64 << 10


def tail_offset(f: BinaryIO, lines: int, *, complete_only: bool) -> int:
    """Where the last ``lines`` lines of the open file ``f`` start, found by reading backwards from its end:
    time and memory go with those lines, not with the file. ``complete_only`` (a follower): a last line
    without its newline yet is not one of them (it is shown once it ends)."""
    size = f.seek(0, 2)
    if size == 0:
        return 0
    f.seek(size - 1)
    ends_line = f.read(1) == b"\n"
    skip = lines + 1 if ends_line or complete_only else lines  # newlines from the end to step over
    if skip == 0:
        return size
    pos = size
    while pos > 0:
        start = max(0, pos - TAIL_BLOCK)
        f.seek(start)
        block = f.read(pos - start)
        end = len(block)
        while skip and (at := block.rfind(b"\n", 0, end)) >= 0:
            skip -= 1
            end = at
        if not skip:
            return start + end + 1
        pos = start
    return 0
