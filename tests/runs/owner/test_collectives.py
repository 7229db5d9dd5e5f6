"""The stuck collective from flight recorder dumps, table-driven on made-up dumps of the shape torch 2.13
writes (``_dump_fr_trace_json``), hostile ones included."""

from __future__ import annotations

import json

import pytest

from launcher.runs.core.collectives import RankDump, stuck_collectives


def dump(*seqs, op="gloo:all_reduce", pg=0, extra=()):
    entries = [{"collective_seq_id": s, "profiling_name": op, "pg_id": pg, "is_p2p": False, "retired": True,
                "state": "scheduled"} for s in seqs]
    return json.dumps({"version": "2.10", "entries": [*entries, *extra], "pg_config": {}})


def dumps(per_rank: dict[int, str], per_node: int = 2) -> list[RankDump]:
    return [RankDump(rank // per_node, rank, text) for rank, text in per_rank.items()]


CASES = [
    ("one rank never entered", {0: dump(1, 2, 3, 4), 1: dump(1, 2, 3)},
     "rank 1 (node 0) never entered all_reduce #4; rank 0 (node 0) waits in it (flight recorder)"),
    ("two ranks on one node, the rest wait", {r: dump(*range(1, 121 if r in (5, 13) else 122), op="nccl:_allgather_base")
                                             for r in range(16)},
     "ranks 5 (node 2), 13 (node 6) never entered _allgather_base #121; 14 ranks on 8 nodes (0-4, 6-12, 14, 15) "
     "wait in it (flight recorder)"),
    ("a rank with no entry at all", {0: dump(1, 2), 1: json.dumps({"entries": []}), 2: dump(1, 2), 3: dump(1, 2)},
     "rank 1 (node 0) never entered all_reduce #2; ranks 0 (node 0), 2, 3 (node 1) wait in it (flight recorder)"),
    ("every rank in it", {0: dump(1, 2), 1: dump(1, 2)},
     "every rank is in all_reduce #2 (flight recorder): no rank is missing from it; a peer or the network is "
     "slow, or a rank is stuck inside it"),
    ("an unreadable dump is left out", {0: dump(1, 2, 3), 1: dump(1, 2), 2: "not json{", 3: dump(1, 2, 3)},
     "rank 1 (node 0) never entered all_reduce #3; ranks 0 (node 0), 3 (node 1) wait in it (flight recorder)"),
    ("a side group behind the default one", {0: dump(1, 2, 3), 1: dump(1, 2, 3, extra=[
        {"collective_seq_id": 7, "profiling_name": "gloo:broadcast", "pg_id": 1}])},
     "every rank is in all_reduce #3 (flight recorder): no rank is missing from it; a peer or the network is "
     "slow, or a rank is stuck inside it"),
    ("hostile names and fields", {0: dump(1, 2, op="gloo:\x1b[31mall_reduce; rm -rf /"), 1: dump(1, extra=[
        {"collective_seq_id": True, "profiling_name": "x"}, {"collective_seq_id": "9"}, "junk",
        {"collective_seq_id": 8, "profiling_name": "x", "pg_id": "\x1b[2J"},
        {"collective_seq_id": 5, "profiling_name": "p2p", "is_p2p": True}])},
     "rank 1 (node 0) never entered 31mall_reducermrf #2; rank 0 (node 0) waits in it (flight recorder)"),
]


@pytest.mark.parametrize(("name", "per_rank", "says"), CASES, ids=[c[0] for c in CASES])
def test_the_stuck_collective_in_words(name, per_rank, says):
    stuck = stuck_collectives(dumps(per_rank))
    assert stuck[0].says == says


@pytest.mark.parametrize("texts", [[], ["[]"], ['{"entries": "x"}'], ['{"version": "2.10"}']])
def test_nothing_to_say_without_entries(texts):
    assert stuck_collectives([RankDump(0, r, t) for r, t in enumerate(texts)]) == []


def test_a_nodes_dumps_are_kept_under_checked_names_only(tmp_path):
    from launcher.backends.base import StackDump
    from launcher.runs.core.store import RunStore
    from launcher.runs.owner.recorder import Recorder
    from launcher.runs.owner.stack_dumps import keep_stacks
    from tests.support.policy_cases import fake_plan

    plan = fake_plan(1)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "h0"}, parse_logs=None)
    path, summary = keep_stacks(rec, 0, (
        StackDump(7, 0, "py-spy", "Thread 7\n    all_reduce (x.py:3)"),
        StackDump(0, 0, "flight-recorder", dump(1, 2)),
        StackDump(0, "../../escaped", "flight-recorder", dump(1)),  # a hostile node's rank
        StackDump(0, True, "flight-recorder", dump(1)),
    ))
    kept = sorted(p.name for p in path.parent.iterdir())
    assert len(kept) == 2 and kept[0].endswith("-node0-rank0-flight-recorder.json"), kept
    assert not list(tmp_path.rglob("*escaped*"))
    assert summary == "node 0: 1 process (py-spy), flight recorder of 1 rank"
    assert "flight" not in path.read_text()


def test_a_stall_takes_the_dumps_by_itself_and_names_the_collective(tmp_path):
    """The run's owner against a fake backend: nobody presses s; the stall alone brings the stacks and the
    flight recorder of both nodes (two ranks each), and rank 3 never entered all_reduce #6."""
    import asyncio

    from launcher.backends.base import StackDump
    from launcher.runs.core.store import RunStore
    from launcher.runs.owner.policy import RunPolicy
    from launcher.runs.owner.recorder import Recorder
    from launcher.runs.owner.settings import Settings
    from tests.support.fake_backend import FakeBackend, FakeNode
    from tests.support.policy_cases import FAST, fake_plan

    class Recorded(FakeBackend):
        async def stacks(self, rank: int) -> tuple[StackDump, ...]:
            ranks = (2 * rank, 2 * rank + 1)
            return (*await super().stacks(rank),
                    *(StackDump(0, r, "flight-recorder", dump(*range(1, 6 if r == 3 else 7))) for r in ranks))

    plan = fake_plan(2)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "h0", 1: "h1"}, parse_logs=None)
    nodes = [FakeNode(exits={1: None}, hang_at_step=5), FakeNode(exits={1: None})]
    settings = Settings(**{**FAST, "poll_s": 0.01, "stall_factor": 3.0, "stall_min_s": 0.2})
    backend = Recorded(plan, nodes)  # time moves with node 0's polls, one step each (see test_policy)
    policy = RunPolicy(backend, rec, settings, secrets=dict, clock=backend.poll_clock(rank=0),
                       cancel_requested=lambda: "(flight recorder)" in (policy.stalls.stalled or "") or nodes[0].polls > 2000)
    outcome = asyncio.run(asyncio.wait_for(policy.run(), 30))
    said = "rank 3 (node 1) never entered all_reduce #6; ranks 0, 1 (node 0), 2 (node 1) wait in it (flight recorder)"
    assert said in outcome.triage.summary, outcome.triage
    details = [t[3] for t in store.get_run(plan.run_id).transitions]
    assert any(d.startswith("stalled at step 5: no step for") and said in d and d.endswith("for every rank's stack")
               for d in details), details
    assert len(list((tmp_path / "runs" / plan.run_id / "stacks").glob("*-flight-recorder.json"))) == 4
