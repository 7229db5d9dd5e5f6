"""The home screen's run kinds: asked of the door once per run and state, so a refresh of up to 500 runs with
nothing changed reads no run's folder. The cache alone, table-driven, then the real app under Pilot."""

from __future__ import annotations

from launcher.api.runs import RunKind
from launcher.events import RunState
from launcher.runs.core.store import RunSummary
from tests.support.tui import BROWSER_RUNS, record_all, wait_for
from tui.app import FsdpTuiApp
from tui.screens.home import HomeScreen
from tui.screens.run_kinds import KnownKinds


def _summary(run_id: str, state: RunState = RunState.RUNNING) -> RunSummary:
    return RunSummary(run_id=run_id, experiment="exp", state=state, attempt=1, num_nodes=1, hosts=("a",),
                      started_at=None, ended_at=None, last_loss=None, best_eval_loss=None, step=None,
                      max_steps=None, workload_path=None)


class Door:
    """``client.runs.kinds`` as the cache calls it, counting the runs it is asked about."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def kinds(self, summaries):
        self.asked.append([s.run_id for s in summaries])
        nothing = {s.run_id: s.state.is_final for s in summaries}
        return [RunKind(s.run_id, trained_nothing=nothing[s.run_id]) for s in summaries]


def test_a_refresh_with_nothing_changed_asks_for_no_kind():
    door, known = Door(), KnownKinds()
    runs = [_summary(f"run-{i:03d}") for i in range(500)]
    first = known.of(runs, door.kinds)
    assert len(door.asked) == 1 and len(door.asked[0]) == 500 and set(first) == {r.run_id for r in runs}
    assert known.of(runs, door.kinds) == first
    assert known.of(list(reversed(runs)), door.kinds) == first  # another sort: the same runs
    assert len(door.asked) == 1


def test_only_a_run_whose_state_changed_or_that_is_new_is_asked_again():
    door, known = Door(), KnownKinds()
    runs = [_summary("a"), _summary("b"), _summary("c")]
    known.of(runs, door.kinds)
    ended = [_summary("a"), _summary("b", RunState.SUCCEEDED), _summary("c"), _summary("d")]
    kinds = known.of(ended, door.kinds)
    assert door.asked == [["a", "b", "c"], ["b", "d"]]
    assert kinds["b"].trained_nothing and not kinds["a"].trained_nothing
    gone = known.of([_summary("a")], door.kinds)  # the others left the list: not kept
    assert set(gone) == {"a"} and set(known.known) == {("a", RunState.RUNNING)} and len(door.asked) == 2


async def test_the_home_screens_refreshes_ask_the_door_for_new_kinds_only(home):
    record_all(home)
    app = FsdpTuiApp(home)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.runs_read
                       and len(app.screen.kinds.known) == 5)  # the first look, then the runs read whole
        screen, runs = app.screen, app.client.runs
        asked: list[int] = []
        reads: list[int] = []
        kinds, known_of = runs.kinds, screen.kinds.of

        def counted_kinds(summaries):
            asked.append(len(summaries))
            return kinds(summaries)

        def counted_of(listed, ask):  # once in every refresh that reads the runs whole, after its kinds
            found = known_of(listed, ask)
            reads.append(1)
            return found

        runs.kinds, screen.kinds.of = counted_kinds, counted_of
        for _ in range(3):
            before = len(reads)
            await pilot.press("r")
            await wait_for(pilot, lambda before=before: len(reads) > before)
        assert asked == [], asked
        assert len(BROWSER_RUNS) == 5 and app.screen.kinds.known
