"""The samples file between rank 0 of a job and the launcher: what the model answered, step by step.

Stdlib only, like :mod:`trainer.wire.protocol`: the trainer writes it, the launcher (no torch) reads it. One
JSON object per line in ``samples.jsonl``, next to the metrics file (``FSDP_TUI_METRICS_FILE``), which the
run's owner mirrors byte for byte as it does the metrics. What a node writes is untrusted: :meth:`SampleSet.
from_json` keeps only well-typed, bounded values (the launcher then makes the text printable, once).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

SAMPLES_FILE = "samples.jsonl"
MAX_SAMPLES = 64
"""Answers kept per step (``logging.samples`` allows no more prompts than this)."""
MAX_TEXT_CHARS = 8_000
"""A prompt, answer or reference is cut here (a few hundred generated tokens fit)."""


@dataclass(frozen=True)
class Sample:
    """One prompt and what the model answered; ``reference`` is the data's own answer (eval rows)."""

    prompt: str
    answer: str
    reference: str | None = None


@dataclass(frozen=True)
class SampleSet:
    """Every prompt's answer at one optimiser step (``0``: before training)."""

    step: int
    samples: tuple[Sample, ...]
    time: float | None = None

    def to_json(self) -> str:
        return json.dumps({"step": self.step, "time": self.time,
                           "samples": [{"prompt": s.prompt, "answer": s.answer,
                                        **({"reference": s.reference} if s.reference is not None else {})}
                                       for s in self.samples]}, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> SampleSet | None:
        """Decode one line; ``None`` for anything that is not a samples record."""
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict) or type(data.get("step")) is not int or data["step"] < 0:
            return None
        raw = data.get("samples")
        if not isinstance(raw, list):
            return None
        samples = []
        for item in raw[:MAX_SAMPLES]:
            if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) \
                    or not isinstance(item.get("answer"), str):
                continue
            reference = item.get("reference")
            samples.append(Sample(item["prompt"][:MAX_TEXT_CHARS], item["answer"][:MAX_TEXT_CHARS],
                                  reference[:MAX_TEXT_CHARS] if isinstance(reference, str) else None))
        stamp = data.get("time")
        time = float(stamp) if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else None
        return cls(data["step"], tuple(samples), time)


def samples_path(metrics_file: str) -> str:
    """Where the samples go: beside the metrics file."""
    return os.path.join(os.path.dirname(os.path.abspath(metrics_file)), SAMPLES_FILE)
