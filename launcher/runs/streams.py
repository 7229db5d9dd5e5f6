"""Byte streams -> lines and metrics: partial lines kept, ANSI stripped, progress lines parsed."""

from __future__ import annotations

import re

from trainer.protocol import MetricRecord

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
_FLOAT_GROUPS = ("loss", "lr", "eval_loss", "tokens_per_s", "grad_norm", "epoch")


class LineSplitter:
    """Feed bytes as they arrive; get back complete lines. A partial last line waits for its end."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self.rest + chunk
        *complete, self.rest = data.split(b"\n")
        return [ANSI.sub("", line.decode("utf-8", "replace")) for line in complete]

    def flush(self) -> list[str]:
        rest, self.rest = self.rest, b""
        return [ANSI.sub("", rest.decode("utf-8", "replace"))] if rest else []


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
