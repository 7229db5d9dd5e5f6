"""The real app on a damaged run store: a window names the file and the way out (no traceback), and its
repair gives the runs back."""

from __future__ import annotations

from textual.widgets import Static

from tests.support.damaged_store import damage, record_run
from tests.support.tui import wait_for
from tui.app import FsdpTuiApp
from tui.screens.home import HomeScreen
from tui.screens.store_damaged import StoreDamagedModal


async def test_the_app_names_a_damaged_store_and_repairs_it_when_asked(home):
    record_run(home, "20260301-090000-good-aaaa", "good", fail=False)
    record_run(home, "20260301-100000-bad-bbbb", "bad", fail=True)
    damage(home / "runs.db", "garbage-headed")
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        # pushed first, composed after: its message is there once the window is mounted
        await wait_for(pilot, lambda: isinstance(app.screen, StoreDamagedModal) and app.screen.query("#store-message"))
        message = app.screen.query_one("#store-message", Static)
        assert f"the run store {home / 'runs.db'} is damaged" in str(message.render())
        assert "file is not a database" in str(message.render())
        await pilot.press("r")
        await wait_for(pilot, lambda: "rebuilt the store from 2 run folders" in str(message.render()))
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and len(app.screen.runs_table.runs) == 2)
        assert {r.state.value for r in app.screen.runs_table.runs} == {"succeeded", "failed"}
    assert app.return_code in (None, 0)
