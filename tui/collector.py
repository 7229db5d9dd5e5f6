"""Python's cyclic garbage collector, run between the user's keys instead of inside their frames.

While nodes stream, drawing allocates tens of thousands of short-lived objects a second. With automatic
collection, a young-generation pass ran about once a second taking up to 20-27 ms, and a key whose frame it
landed in waited for it (BENCHMARKS.md, the app under load). Nearly everything is freed by reference
counting anyway; the collector is only needed for the rare cycles. So the app collects on a timer, when
no key (or click, or wheel turn) came in the last moment, and still at least every few seconds while keys
never stop (a key held down). Memory between collections grows by at most that long's cycles.
"""

from __future__ import annotations

import gc
import time

COLLECT_EVERY_S = 0.5
"""How often the young generations are collected (the first two; what survives goes to the oldest)."""
QUIET_S = 0.15
"""No input for this long: a collection now delays no key's frame."""
AT_LEAST_EVERY_S = 3.0
"""Collected anyway after this long, even while keys keep coming."""
MIDDLE_EVERY = 10
"""Every this many collections (about every 5 s), the middle generation too."""
FULL_EVERY = 120
"""Every this many collections (about a minute), the oldest generation too."""


class IdleCollector:
    """Owns the collector while the app runs: ``start`` once mounted, ``stop`` when the app ends (the
    collector is the process's: tests run many apps in one process)."""

    def __init__(self, app) -> None:
        self.app = app
        self.collected_at = time.monotonic()
        self.collections = 0
        self.timer = None

    def start(self) -> None:
        gc.collect()
        gc.freeze()  # what start-up allocated stays: no collection needs to look at it again
        gc.disable()
        self.timer = self.app.set_interval(COLLECT_EVERY_S, self.tick)

    def tick(self) -> None:
        now = time.monotonic()
        if self.app.input_within(QUIET_S) and now - self.collected_at < AT_LEAST_EVERY_S:
            return
        self.collections += 1
        n = self.collections
        gc.collect(2 if n % FULL_EVERY == 0 else 1 if n % MIDDLE_EVERY == 0 else 0)
        self.collected_at = time.monotonic()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.stop()
        gc.unfreeze()
        gc.enable()
