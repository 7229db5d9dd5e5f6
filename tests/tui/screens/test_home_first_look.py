"""The home screen's first look: the newest runs, as the store has them, are drawn before anything else
is asked of the door (live runs adopted, each run's folder read for its kind, the sweeps, lost nodes); the
rest comes once they are drawn, off the drawing's way (BENCHMARKS.md: the app's first screen at 100,000
runs). The real app under Pilot; the door's calls are recorded, not replaced."""

from __future__ import annotations

from launcher.api.nodes import Nodes
from launcher.api.runs import Runs
from launcher.api.sweeps import Sweeps
from tests.support.tui import record_all, wait_for
from tui.app import FsdpTuiApp
from tui.messages import RunsRead
from tui.screens.home import HOME_RUNS, HomeScreen


async def test_the_first_screen_draws_the_newest_runs_before_any_other_look(home, monkeypatch):
    record_all(home)
    asked: list[str] = []
    limits: list[int] = []  # what each list asked the store for
    for door, names in ((Runs, ("count", "list", "adopt", "kinds")), (Sweeps, ("list",)), (Nodes, ("reap_lost",))):
        for name in names:
            real = getattr(door, name)

            def recorded(self, *args, _real=real, _name=f"{door.__name__}.{name}", **kwargs):
                asked.append(_name)
                if _name == "Runs.list":
                    limits.append(kwargs["limit"])
                return _real(self, *args, **kwargs)

            monkeypatch.setattr(door, name, recorded)
    seen: list[tuple[list[str], RunsRead, int]] = []  # what was asked when each read was drawn, the rows
    real_show = HomeScreen._show_runs

    def drawn(self: HomeScreen, message: RunsRead) -> None:
        real_show(self, message)
        seen.append((list(asked), message, self.runs_table.row_count))

    monkeypatch.setattr(HomeScreen, "_show_runs", drawn)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:  # 40 lines: the first look's rows
        await wait_for(pilot, lambda: any(read.sweeps is not None for _, read, _ in seen)
                       and "Nodes.reap_lost" in asked)
        before, first, rows = seen[0]
        assert first.sweeps is None and first.kinds is None  # the runs alone
        assert rows == 5 and [r.run_id for r in first.runs] == [r.run_id for r in app.screen.runs_table.runs]
        assert before == ["Runs.count", "Runs.list"], before  # nothing else asked before they were drawn
        assert limits[0] == 40 and max(limits) == HOME_RUNS  # a screenful first (every cell is measured)
        later = asked[len(before):]
        assert {"Runs.adopt", "Runs.kinds", "Sweeps.list", "Nodes.reap_lost"} <= set(later), later
        whole = next(read for _, read, _ in seen if read.sweeps is not None)
        assert whole.kinds is not None and set(whole.kinds) == {r.run_id for r in whole.runs}
