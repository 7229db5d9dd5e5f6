"""The frame a view key causes is drawn as soon as its action has run (``tui/frames.py``), not at the screen's
next update tick: with the update timer stopped, the monitor's view keys still reach the screen."""

from __future__ import annotations

import asyncio

import pytest
from textual import events

from tests.support.tui import FedEvents
from tui.app import FsdpTuiApp
from tui.screens.monitor import RunMonitorScreen


@pytest.mark.parametrize("nodes, key, shown", [
    (2, "m", lambda views: views.merged),
    (2, "o", lambda views: views.overview_shown),
    (12, "m", lambda views: views.merged),  # from the overview
    (12, "o", lambda views: not views.overview_shown),
])
async def test_a_view_key_is_drawn_without_waiting_for_the_update_tick(home, nodes, key, shown):
    app = FsdpTuiApp(home)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = RunMonitorScreen("r", nodes, events=FedEvents())
        await app.push_screen(screen)
        await pilot.pause()
        resumed: list[bool] = []
        timer = screen._update_timer
        timer.pause()
        timer.resume = lambda: resumed.append(True)  # the tick never comes: a frame now is the key's own
        drawn: list[bool] = []
        refresh = screen._compositor_refresh

        def drawing() -> None:
            drawn.append(shown(screen.views))
            refresh()

        screen._compositor_refresh = drawing
        app.post_message(events.Key(key, key))  # as a terminal's key arrives (Pilot's pauses draw frames themselves)
        for _ in range(2000):  # polled without Pilot, up to 10 s
            if True in drawn:
                break
            await asyncio.sleep(0.005)
        assert True in drawn, f"no frame showed what {key!r} changed, {len(drawn)} frames drawn"
        assert resumed, "the screen asked its timer for a frame too (the usual way, left in place)"
