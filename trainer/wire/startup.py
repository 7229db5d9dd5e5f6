"""A process's start-up without the cyclic garbage collector, and its end without the interpreter's teardown
(:func:`exit_without_teardown`). The start-up: importing torch, transformers or MLflow
allocates hundreds of thousands of objects that live as long as the process, and each few hundred set off
a collection that finds almost nothing (about a fifth of those imports' time: BENCHMARKS.md "Start-up
without the garbage collector", which also shows where it does not pay: a run's owner, the app). Used by
the trainer's ranks and an owner's first use of MLflow; the test suite does the same for its collection
(``tests/conftest.py``)."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator
from typing import NoReturn


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


def exit_without_teardown(code: int) -> NoReturn:
    """End the process as ``sys.exit`` would, minus the interpreter's teardown of torch, transformers
    and their extensions (1-2.5 s measured on a 2-core machine, during which torchrun waits; and where gloo's
    threads can abort a rank, "terminate called without an active exception", when the process group's
    objects are freed late). Every ``atexit`` handler still runs (logging, DCP, ...) and the standard streams
    are flushed; with a non-daemon thread still running the ordinary exit is taken, which waits for it."""
    import atexit
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and t.is_alive() and not t.daemon for t in threading.enumerate()):
        raise SystemExit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
