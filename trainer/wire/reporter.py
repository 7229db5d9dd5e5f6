"""A stdlib-only metrics reporter for any training script: ``Reporter().log(step=..., loss=...)``.

Appends :class:`trainer.wire.protocol.MetricRecord` JSON lines to ``$FSDP_TUI_METRICS_FILE``, which
fsdp-tui tails from node 0. Without that variable (not launched by fsdp-tui) it does nothing.
Call it from rank 0 only. No torch import, so it costs nothing to adopt.
"""

from __future__ import annotations

import os
import time
from typing import Any

from trainer.wire.protocol import METRICS_FILE_ENV, MetricRecord, RankMemory


class Reporter:
    def __init__(self, path: str | None = None) -> None:
        self.path = path if path is not None else os.environ.get(METRICS_FILE_ENV)
        self._file = None

    @property
    def enabled(self) -> bool:
        return bool(self.path)

    def log(self, step: int, *, memory: list[dict[str, Any]] | None = None, **fields: Any) -> None:
        """One record; known fields (loss, lr, grad_norm, tokens_per_s, eval_loss, ...) and extras."""
        known = {k: v for k, v in fields.items() if k in MetricRecord.__dataclass_fields__}
        extra = {k: v for k, v in fields.items() if k not in known}
        known.setdefault("time", time.time())
        mem = tuple(RankMemory(**m) for m in memory or ())
        self.write(MetricRecord(step=step, memory=mem, extra=extra, **known))

    def write(self, record: MetricRecord) -> None:
        if not self.path:
            return
        if self._file is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._file.write(record.to_json() + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
