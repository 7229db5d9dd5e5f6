"""What the model answered as it learned, read from a run's record: decoded once, here, into clean values.

The trainer's rank 0 writes ``samples.jsonl`` beside its metrics (``logging.samples``); the run's owner
mirrors it byte for byte (``launcher.runs.core.layout.SAMPLES``). Everything in it came from a node: each
line is decoded by :meth:`trainer.wire.samples.SampleSet.from_json` (types and sizes bounded) and every
text is made printable (:func:`launcher.untrusted.printable`, newlines kept), so the owner's MLflow table,
``show --samples``, the monitor and the comparisons all read the same clean values.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from launcher.runs.core.layout import SAMPLES, last_lines
from launcher.untrusted import printable
from trainer.wire.samples import Sample, SampleSet

MAX_READ_BYTES = 32 << 20
"""The end of a samples file that is read: a long run's newest answers (a few KB a step)."""


def read_samples(directory: Path) -> list[SampleSet]:
    """Every complete samples line of the run's record, oldest first (a torn last line is left out)."""
    out = []
    for line in last_lines(Path(directory) / SAMPLES, MAX_READ_BYTES):
        found = SampleSet.from_json(line.decode("utf-8", errors="replace"))
        if found is not None:
            out.append(_clean(found))
    return out


def _clean(found: SampleSet) -> SampleSet:
    return replace(found, samples=tuple(
        Sample(printable(s.prompt, newlines=True), printable(s.answer, newlines=True),
               None if s.reference is None else printable(s.reference, newlines=True)) for s in found.samples))
