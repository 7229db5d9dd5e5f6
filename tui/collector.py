"""Python's cyclic garbage collector, run in small steps between the user's keys.

While nodes stream, drawing allocates tens of thousands of objects a second, and many live a while
(Textual keeps drawn lines, and each drawn line keeps what was cut from it). With automatic collection,
every twentieth pass also went over everything that had lived a while: 17-27 ms, about once a second,
and a key whose frame it landed in waited for it (BENCHMARKS.md, the app under load). Nearly everything is
freed by reference counting anyway; the collector is needed only for the rare cycles. So while the app
runs, automatic collection is off and a timer collects:

- the youngest objects ten times a second, unless a key (or a click, or the wheel) came in the last
  moment: a millisecond or two each, never inside a key's frame;
- everything once nobody pressed anything for a second, at most every few seconds (the long pass, while
  nobody waits for a frame), and anyway now and then while keys never stop (a key held down).
"""

from __future__ import annotations

import gc
import time

TICK_S = 0.1
"""How often the timer collects the youngest generation."""
QUIET_S = 0.05
"""No input for this long: the key's frame is drawn or on its way; a short collection delays nothing."""
MIDDLE_EVERY_S = 1.0
"""The middle generation too (what outlived a young collection: cycles among it are most of the garbage)
this often, when no input came for ``MIDDLE_QUIET_S``."""
MIDDLE_QUIET_S = 0.15
IDLE_S = 1.0
"""No input for this long: the user is reading, and the long pass can run."""
FULL_EVERY_S = 10.0
"""The long pass runs at most this often while idle..."""
FULL_AT_LEAST_EVERY_S = 60.0
"""...and at least this often (cycles made meanwhile wait for it)."""


class IdleCollector:
    """Owns the collector while the app runs: ``start`` once mounted, ``stop`` when the app ends (the
    collector is the process's: tests run many apps in one)."""

    def __init__(self, app) -> None:
        self.app = app
        self.full_at = self.middle_at = time.monotonic()
        self.timer = None

    def start(self) -> None:
        # What start-up allocated stays: no collection needs to look at it again. The young and middle
        # generations are collected first (start-up's garbage is there); a full pass would go over every
        # object the imports made, for the few cycles among them (0.3 s in a process that holds torch).
        gc.collect(1)
        gc.freeze()
        gc.disable()
        self.full_at = self.middle_at = time.monotonic()
        self.timer = self.app.set_interval(TICK_S, self.tick)

    def tick(self) -> None:
        now = time.monotonic()
        since_full, since_middle = now - self.full_at, now - self.middle_at
        if since_full >= FULL_AT_LEAST_EVERY_S or (since_full >= FULL_EVERY_S and not self.app.input_within(IDLE_S)):
            gc.collect()
            self.full_at = self.middle_at = time.monotonic()
        elif since_middle >= MIDDLE_EVERY_S and not self.app.input_within(MIDDLE_QUIET_S):
            gc.collect(1)
            self.middle_at = time.monotonic()
        elif not self.app.input_within(QUIET_S):
            gc.collect(0)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.stop()
        gc.unfreeze()
        gc.enable()
