"""Byte streams -> lines and metrics: partial lines kept, output made safe to show, progress lines parsed."""

from __future__ import annotations

import re

from launcher.runs.core.display import sanitize_line, show_lines
from trainer.protocol import MetricRecord

MAX_PENDING_BYTES = 1 << 20
"""A partial line longer than this is shown as it is (cut for display) and the rest of it skipped: a job
that never ends its line must not grow a follower without bound."""
_FLOAT_GROUPS = ("loss", "lr", "eval_loss", "tokens_per_s", "grad_norm", "epoch")


class LineSplitter:
    """Feed bytes as they arrive; get back complete lines, sanitised for display
    (:func:`~launcher.runs.core.display.sanitize_line`). A partial last line waits for its end."""

    def __init__(self, keep_colour: bool = False) -> None:
        self.rest = b""
        self.keep_colour = keep_colour
        self.skipping = False
        """Inside an over-long line already shown: its bytes up to the next newline are dropped."""

    def feed(self, chunk: bytes) -> list[str]:
        data = self.rest + chunk
        *complete, self.rest = data.split(b"\n")
        if self.skipping and complete:
            complete, self.skipping = complete[1:], False
        elif self.skipping:
            self.rest = b""
        lines = show_lines(complete, self.keep_colour)
        if b"\r" in chunk:  # a redraw: only its last segment can ever be shown, the rest need not wait
            redraw = self.rest.rfind(b"\r", 0, len(self.rest.rstrip(b"\r")))
            if redraw > 0:
                self.rest = self.rest[redraw:]
        if len(self.rest) > MAX_PENDING_BYTES:
            lines.append(self._show(self.rest))
            self.rest, self.skipping = b"", True
        return lines

    def flush(self) -> list[str]:
        rest, self.rest = self.rest, b""
        return [self._show(rest)] if rest and not self.skipping else []

    def _show(self, line: bytes) -> str:
        return sanitize_line(line.decode("utf-8", "replace"), self.keep_colour)


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
