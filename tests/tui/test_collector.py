"""The app's garbage collection schedule (``tui/collector.py``), on a fake clock: the youngest objects at each
tick unless a key just came, the middle generation each second at a quiet moment, everything when nobody
pressed a key for a second (or at the latest after a minute), and Python's own collection back at the end."""

from __future__ import annotations

import gc

import pytest

import tui.collector as collector


class FakeApp:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.input_at = -100.0

    def input_within(self, seconds: float) -> bool:
        return self.clock[0] - self.input_at < seconds

    def set_interval(self, interval, callback):
        return None


@pytest.fixture
def schedule(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(collector.time, "monotonic", lambda: clock[0])
    collected: list[int] = []
    monkeypatch.setattr(collector.gc, "collect", lambda generation=2: collected.append(generation))
    app = FakeApp(clock)
    idle = collector.IdleCollector(app)
    idle.start()
    collected.clear()
    yield clock, app, idle, collected
    monkeypatch.undo()
    idle.stop()
    assert gc.isenabled()


def run(clock, idle, until: float, step: float = collector.TICK_S) -> None:
    while clock[0] < until - 1e-9:
        clock[0] += step
        idle.tick()


def test_while_keys_come_only_young_collections_run_between_them(schedule):
    clock, app, idle, collected = schedule
    assert not gc.isenabled(), "automatic collection is off while the app runs"
    for _ in range(20):  # a key every 0.3 s for 6 s
        app.input_at = clock[0]
        run(clock, idle, clock[0] + 0.3)
    assert set(collected) <= {0, 1} and collected.count(0) >= 20, collected
    assert 2 not in collected, "no full collection while keys keep coming (under a minute)"
    assert collected.count(1) >= 3, "the middle generation each second, at quiet moments"


def test_a_tick_right_after_a_key_collects_nothing(schedule):
    clock, app, idle, collected = schedule
    clock[0] += 0.5
    app.input_at = clock[0] - 0.01
    idle.tick()
    assert collected == []


def test_everything_is_collected_once_nobody_presses_a_key_and_at_least_every_minute(schedule):
    clock, app, idle, collected = schedule
    app.input_at = 0.0
    run(clock, idle, collector.FULL_EVERY_S + 1.5)
    assert collected.count(2) == 1, "idle past a second, ten seconds after the last full pass"
    collected.clear()
    while clock[0] < 80:  # keys never stop
        app.input_at = clock[0]
        clock[0] += collector.TICK_S
        idle.tick()
    assert collected.count(2) == 1, "a full pass after a minute even while keys keep coming"


def test_the_start_collects_the_young_and_middle_generations_then_freezes(monkeypatch):
    """No full pass at the start: it would go over every object the process's imports made (0.3 s in a
    process that holds torch, as a test worker does), for the few cycles among them."""
    calls: list[tuple] = []
    monkeypatch.setattr(collector.gc, "collect", lambda generation=2: calls.append(("collect", generation)))
    monkeypatch.setattr(collector.gc, "freeze", lambda: calls.append(("freeze",)))
    idle = collector.IdleCollector(FakeApp([0.0]))
    idle.start()
    assert calls == [("collect", 1), ("freeze",)]
    monkeypatch.undo()
    idle.stop()
    assert gc.isenabled()
