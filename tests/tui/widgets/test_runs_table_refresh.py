"""The runs table refreshed in place: when the same runs are shown in the same order (a live run's duration,
step or loss moved), only the changed cells are written; whatever happens, the table shows what a table
built from nothing shows. The real widget in a real app under Pilot, beside a twin rebuilt whole each time."""

from __future__ import annotations

import dataclasses
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from textual.app import App, ComposeResult

from launcher.events import RunState
from launcher.runs.core import run_records
from launcher.runs.core.run_records import RunSummary
from tui.widgets.runs_table import COLUMNS, RunsTable

T0 = 1_790_000_000.0


@pytest.fixture(autouse=True, scope="module")
def _a_clock_that_stands_still():
    """A running run's duration counts to now: the twins are built a moment apart, so both read one clock that
    stands still, or a second ticking between them shows as a difference."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_records, "time", types.SimpleNamespace(time=lambda: T0 + 100_000.0))
        yield


def _run(i: int, state: RunState = RunState.SUCCEEDED, **changes) -> RunSummary:
    run = RunSummary(run_id=f"20261202-0000{i:02d}-exp-{i:04x}", experiment=f"exp{i % 3}", state=state, attempt=1,
                     num_nodes=1 + i % 4, hosts=("a",), started_at=T0 + 60 * i, ended_at=T0 + 60 * i + 30 + i,
                     last_loss=1.0 / (i + 1), best_eval_loss=None, step=10 + i, max_steps=100, workload_path=None)
    return dataclasses.replace(run, **changes)


class _Twins(App):
    """Two tables: ``live`` changed as the home screen changes it, ``fresh`` built whole after each change."""

    def compose(self) -> ComposeResult:
        yield RunsTable(id="live")
        yield RunsTable(id="fresh")


def _content(table: RunsTable) -> list:
    """What the table shows: its headers, then each row's key and cells, in order."""
    headers = [str(col.label) for col in table.columns.values()]
    return [headers, *((key, [str(cell) for cell in table.get_row(key)]) for key in table.shown_ids)]


async def test_a_live_runs_moving_cells_are_written_in_place_and_the_table_is_not_cleared():
    runs = [_run(i) for i in range(30)]
    runs[3] = _run(3, RunState.RUNNING, ended_at=None, step=12)
    app = _Twins()
    async with app.run_test() as pilot:
        live, fresh = app.query_one("#live", RunsTable), app.query_one("#fresh", RunsTable)
        live.show(runs)
        live.move_cursor(row=5)
        cleared = []
        live.clear = lambda *a, **k: cleared.append(a) or RunsTable.clear(live, *a, **k)  # type: ignore[method-assign]
        moved = [*runs]
        moved[3] = dataclasses.replace(runs[3], step=13, last_loss=0.125)
        live.show(moved)
        await pilot.pause()
        assert cleared == []  # written in place
        row = dict(zip([c.key for c in COLUMNS], live.get_row(runs[3].run_id), strict=True))
        assert (str(row["step"]), str(row["loss"])) == ("13/100", "0.1250")
        assert live.cursor_row == 5
        fresh.show(moved)
        assert _content(live) == _content(fresh)
        live.show([_run(99), *moved])  # a new run: rows added, the table built again
        assert cleared and live.shown_ids[0] == _run(99).run_id


_STATES = st.sampled_from([RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED])
_CHANGES = st.fixed_dictionaries({}, optional={
    "state": _STATES, "step": st.integers(0, 100), "last_loss": st.none() | st.floats(0.01, 9, allow_nan=False),
    "ended_at": st.none() | st.floats(T0, T0 + 99_999), "experiment": st.sampled_from(["exp0", "exp1", "zeta"])})
_OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("change"), st.integers(0, 11), _CHANGES),
    st.tuples(st.just("add"), st.integers(12, 40)),
    st.tuples(st.just("drop"), st.integers(0, 11)),
    st.tuples(st.just("filter"), st.sampled_from(["", "exp1", "run", "zeta", "fail"])),
    st.tuples(st.just("sort"), st.sampled_from([None, *(c.key for c in COLUMNS)]), st.booleans()),
    st.tuples(st.just("mark"), st.sets(st.integers(0, 11), max_size=3)),
), min_size=1, max_size=12)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=_OPERATIONS)
async def test_after_any_changes_the_table_shows_what_one_built_from_nothing_shows(operations):
    runs = [_run(i, RunState.RUNNING if i % 4 == 0 else RunState.SUCCEEDED) for i in range(12)]
    app = _Twins()
    async with app.run_test():
        live, fresh = app.query_one("#live", RunsTable), app.query_one("#fresh", RunsTable)
        live.show(runs)
        for operation in operations:
            kind, *args = operation
            if kind == "change" and args[0] < len(runs):
                runs[args[0]] = dataclasses.replace(runs[args[0]], **args[1])
            elif kind == "add" and _run(args[0]).run_id not in {r.run_id for r in runs}:
                runs.insert(0, _run(args[0]))
            elif kind == "drop" and args[0] < len(runs):
                del runs[args[0]]
            if kind in ("change", "add", "drop"):
                live.show([*runs])
            elif kind == "filter":
                live.set_filter(args[0])
            elif kind == "sort":
                live.sort_by(*args)
            else:
                live.set_marked({runs[i].run_id for i in args[0] if i < len(runs)})
            fresh.runs, fresh.filter_text, fresh.marked = live.runs, live.filter_text, live.marked
            fresh.sort_column, fresh.sort_reverse = live.sort_column, live.sort_reverse
            fresh.rebuild_all()
            assert _content(live) == _content(fresh), operation
