"""A process's start-up without the cyclic garbage collector: importing torch, transformers or MLflow
allocates hundreds of thousands of objects that live as long as the process, and each few hundred set off
a collection that finds almost nothing (about a fifth of those imports' time: BENCHMARKS.md "Start-up
without the garbage collector", which also shows where it does not pay: a run's owner, the app). Used by
the trainer's ranks and an owner's first use of MLflow; the test suite does the same for its collection
(``tests/conftest.py``)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def imports_without_gc(freeze: bool = True) -> Iterator[None]:
    """No collection inside; then, with ``freeze``, what exists is moved out of the collector's sight (later
    collections skip it: it lives as long as the process), and collection is back on as it was. Without
    ``freeze`` (a process already at work, whose garbage must still be found) only the pause."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()
