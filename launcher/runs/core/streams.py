"""Byte streams -> lines and metrics: partial lines kept, output made safe to show, progress lines parsed."""

from __future__ import annotations

import re

from launcher.runs.core.display import rank_of, sanitize_line, show_lines
from trainer.protocol import MetricRecord

MAX_PENDING_BYTES = 1 << 20
"""A partial line longer than this keeps only its start (what display shows) and counts the rest until its
end: a job that never ends its line must not grow a follower without bound."""
LONG_HEAD_BYTES = 64 << 10
_FLOAT_GROUPS = ("loss", "lr", "eval_loss", "tokens_per_s", "grad_norm", "epoch")


class LineSplitter:
    """Feed bytes as they arrive; get back complete lines, sanitised for display
    (:func:`~launcher.runs.core.display.sanitize_line`). A partial last line waits for its end.
    After each ``feed``/``flush``, ``ranks`` holds the rank each returned line was tagged with (torchrun's
    tee, ``launcher.workload.plan.RANK_TAG_TEMPLATE``; ``None``: untagged)."""

    def __init__(self, keep_colour: bool = False) -> None:
        self.rest = b""
        self.keep_colour = keep_colour
        self.long_head: bytes | None = None
        """The start of an over-long line still arriving (its bytes past it are counted, not kept)."""
        self.long_chars = 0
        self.ranks: list[int | None] = []
        """The rank of each line the last ``feed`` or ``flush`` returned."""
        self.rest_rank: int | None = None
        """The rank tag of the partial line waiting in ``rest`` (a redraw may cut the tag off its start)."""

    def feed(self, chunk: bytes) -> list[str]:
        lines: list[str] = []
        ranks: list[int | None] = []
        if self.long_head is not None:
            end = chunk.find(b"\n")
            self.long_chars += _chars(chunk if end < 0 else chunk[:end])
            if end < 0:
                self.ranks = []
                return []
            ranks.append(rank_of(self.long_head))
            lines.append(self._show_long())
            chunk = chunk[end + 1:]
        data = self.rest + chunk
        *complete, self.rest = data.split(b"\n")
        if b"\x1b_" in data:
            complete = _apart(complete)
        lines += show_lines(complete, self.keep_colour)
        if complete:
            ranks += [rank_of(line) for line in complete]
            ranks[-len(complete)] = ranks[-len(complete)] if ranks[-len(complete)] is not None else self.rest_rank
            self.rest_rank = None
        if b"\r" in chunk:  # a redraw: only its last segment can ever be shown, the rest need not wait
            redraw = self.rest.rfind(b"\r", 0, len(self.rest.rstrip(b"\r")))
            if redraw > 0:
                self.rest_rank = rank_of(self.rest[:redraw]) if self.rest_rank is None else self.rest_rank
                self.rest = self.rest[redraw:]
        if len(self.rest) > MAX_PENDING_BYTES:
            self.long_head, self.long_chars, self.rest = self.rest[:LONG_HEAD_BYTES], _chars(self.rest), b""
        self.ranks = ranks
        return lines

    def flush(self) -> list[str]:
        if self.long_head is not None:
            self.ranks = [rank_of(self.long_head)]
            return [self._show_long()]
        rest, self.rest = self.rest, b""
        self.ranks = [rank_of(rest) if rank_of(rest) is not None else self.rest_rank] if rest else []
        self.rest_rank = None
        return [self._show(rest)] if rest else []

    def _show_long(self) -> str:
        head, self.long_head = self.long_head or b"", None
        return sanitize_line(head.decode("utf-8", "replace"), self.keep_colour, line_chars=self.long_chars)

    def _show(self, line: bytes) -> str:
        return sanitize_line(line.decode("utf-8", "replace"), self.keep_colour)


_TAG = re.compile(rb"\x1b_fsdp-tui rank=(\d{1,7})\x1b\\")


def _apart(raw: list[bytes]) -> list[bytes]:
    """Lines in which another rank's tag appears mid-line, cut there: torchrun tees each rank's partial
    line as it comes, so one rank's unfinished line and another's can share a line of the node's log
    (a tag of the same rank mid-line is only the rest of its own line, and stays)."""
    out: list[bytes] = []
    for line in raw:
        tags = list(_TAG.finditer(line)) if b"\x1b_" in line else []
        cuts = [t.start() for prev, t in zip(tags, tags[1:], strict=False) if t.group(1) != prev.group(1)]
        if not cuts:
            out.append(line)
            continue
        starts = [0, *cuts]
        out += [line[a:b] for a, b in zip(starts, [*cuts, len(line)], strict=True)]
    return out


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
