"""The run policy against a fake backend: retries, timeout, lost node, cancel, one failure stopping the
others, adoption, ports. No processes, no sockets: each case runs in milliseconds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from launcher.backends.base import SchedulerCause
from launcher.events import NodeState, RunState
from launcher.runs.core.store import RunStore
from launcher.runs.owner.policy import RunPolicy
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.settings import Settings
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from tests.support.fake_backend import FakeBackend, FakeNode
from tests.support.policy_cases import FAST, Case, fake_plan, run_case

CASES = [
    Case("a cancel asked for while the nodes are prepared ends it before its job starts", [FakeNode()],
         RunState.CANCELLED, cancel_after_polls=0, starts=[], stopped=False, detail="before its job started"),
    Case("every node exits 0", [FakeNode(), FakeNode()], RunState.SUCCEEDED, starts=["start 1"],
         node_states={0: NodeState.EXITED, 1: NodeState.EXITED}, stopped=False),
    Case("a failure on one node stops the others", [FakeNode(exits={1: None}), FakeNode(exits={1: 3})],
         RunState.FAILED, node_states={0: NodeState.STOPPED, 1: NodeState.EXITED},
         detail="stopping: node 1 (h1) exited with code 3", stopped=True),
    Case("a retry after a failure succeeds", [FakeNode(exits={1: 1, 2: 0})], RunState.SUCCEEDED,
         settings={"max_retries": 1}, starts=["start 1", "start 2"]),
    Case("retries run out", [FakeNode(exits={1: 1, 2: 2})], RunState.FAILED, settings={"max_retries": 1},
         starts=["start 1", "start 2"]),
    Case("a timeout stops every node", [FakeNode(exits={1: None}), FakeNode(exits={1: None})],
         RunState.TIMED_OUT, settings={"timeout_s": 0.05}, node_states={0: NodeState.STOPPED, 1: NodeState.STOPPED},
         stopped=True),
    Case("cancel stops every node", [FakeNode(exits={1: None}), FakeNode(exits={1: None})], RunState.CANCELLED,
         cancel_after_polls=3, node_states={0: NodeState.STOPPED, 1: NodeState.STOPPED}, stopped=True),
    Case("a lost node fails the run, named, and stays lost", [FakeNode(exits={1: None}),
                                                               FakeNode(exits={1: None}, lost_after_polls=3)],
         RunState.FAILED, node_states={0: NodeState.STOPPED, 1: NodeState.LOST}, detail="node 1 (fake): lost",
         stopped=True),
    Case("a node that cannot start fails the attempt and stops the others",
         [FakeNode(), FakeNode(start_error="cannot start 'torchrun'")], RunState.FAILED,
         detail="cannot start 'torchrun'", stopped=True),
    Case("a node whose recorder died is a failed node", [FakeNode(exits={1: None}), FakeNode(orphaned=True)],
         RunState.FAILED, detail="node 1", stopped=True),
    Case("an adopted run is followed, not started again", [FakeNode(), FakeNode()], RunState.SUCCEEDED,
         adopted=True, running_attempt=1, starts=[]),
    Case("an adopted run that never started fails saying so", [FakeNode(absent=True)], RunState.FAILED,
         adopted=True, running_attempt=1, starts=[], detail="interrupted before it started"),
    Case("a taken default port moves", [FakeNode()], RunState.SUCCEEDED, port_free=False,
         detail="rendezvous on port 29507 instead"),
    Case("a taken chosen port stops the launch", [FakeNode()], RunState.FAILED, port_free=False,
         master_port=29600, starts=[], detail="compute.master_port"),
    Case("a port taken on node 0 as the job starts moves the run once, without a retry", [FakeNode(), FakeNode()],
         RunState.SUCCEEDED, port_taken_starts=1, starts=["start 1", "start 1"],
         detail="rendezvous on port 41234 instead of 29500"),
    Case("a port taken twice fails the run naming node 0", [FakeNode()], RunState.FAILED, port_taken_starts=2,
         starts=["start 1", "start 1"], detail="rendezvous port 41234 is taken"),
    Case("a port the workload names is never moved", [FakeNode()], RunState.FAILED, port_taken_starts=1,
         master_port=29600, starts=["start 1"], detail="rendezvous port 29600 is taken"),
    Case("a job that finds its port taken runs again on another port, not counted as a retry",
         [FakeNode(exits={1: 1, 2: 0}, log=b"torch.distributed.DistNetworkError: The server socket has failed to "
                   b"listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, "
                   b"message: address already in use\n"), FakeNode(exits={1: None, 2: 0})],
         RunState.SUCCEEDED, starts=["start 1", "start 2"],
         detail="attempt 2: the rendezvous port 29500 was taken on node 0 as its job started; rendezvous on port 41234"),
    Case("an address in use that is not the rendezvous port is the job's own failure",
         [FakeNode(exits={1: 1, 2: 0}, log=b"OSError: [Errno 98] Address already in use: port 8080\n")],
         RunState.FAILED, starts=["start 1"]),
    Case("a workload that cannot run there is refused before it starts", [FakeNode(), FakeNode()],
         RunState.FAILED, probe_facts={"python": {"version": [3, 11, 7]}, "gpus": {"smi": None, "names": []},
                                       "packages": {"torch": {"version": "2.13.0+cpu", "import": "skipped"}},
                                       "disk": {"path": "/n", "existing": "/", "free_bytes": 2**40}, "master": {}},
         settings={}, starts=[], detail="GPU processes per node", stopped=False),
    Case("a workload's own command is not refused for packages it may bring itself", [FakeNode()],
         RunState.SUCCEEDED, probe_facts={"python": {"version": [3, 11, 7]}, "gpus": {"smi": "/x", "names": ["H100"] * 2},
                                          "packages": {"torch": {"version": None}},
                                          "disk": {"path": "/n", "existing": "/", "free_bytes": 2**40}, "master": {}},
         starts=["start 1"]),
    Case("--force starts it anyway", [FakeNode()], RunState.SUCCEEDED, settings={"preflight": False},
         probe_facts={"python": {"version": [3, 11, 7]}, "gpus": {"smi": None, "names": []},
                      "packages": {"torch": {"version": "2.13.0+cpu", "import": "skipped"}},
                      "disk": {"path": "/n", "existing": "/", "free_bytes": 2**40}, "master": {}},
         starts=["start 1"]),
    Case("the cheap checks run on every node before the start", [FakeNode()], RunState.SUCCEEDED,
         probe_facts={"python": {"version": [3, 11, 7]}, "gpus": {"smi": "/x", "names": ["H100"] * 2},
                      "packages": {"torch": {"version": None}},
                      "disk": {"path": "/n", "existing": "/", "free_bytes": 2**40}, "master": {}},
         starts=["start 1"], probes=1),
    Case("checked by the launch just before: the owner does not probe the nodes again", [FakeNode(), FakeNode()],
         RunState.SUCCEEDED, settings={"checked": True},
         probe_facts={"python": {"version": [3, 11, 7]}, "gpus": {"smi": None, "names": []},
                      "packages": {"torch": {"version": "2.13.0+cpu", "import": "skipped"}},
                      "disk": {"path": "/n", "existing": "/", "free_bytes": 2**40}, "master": {}},
         starts=["start 1"], probes=0),
    Case("a job waiting in a scheduler's queue is pending with its reason, then runs", [FakeNode(
         queued_polls={1: 3}), FakeNode(queued_polls={1: 3})], RunState.SUCCEEDED, starts=["start 1"],
         detail="queued (pending: Resources)"),
    Case("a job stopped at its time limit with a checkpoint is resubmitted, not counted as a retry",
         [FakeNode(resubmit={1: "time limit"}), FakeNode(resubmit={1: "time limit"})], RunState.SUCCEEDED,
         settings={"max_resubmits": 2}, starts=["start 1", "start 2"], detail="resubmitted, it resumes"),
    Case("resubmissions run out: the run timed out, saying how to go on", [FakeNode(resubmit={1: "time limit",
                                                                                  2: "time limit"})],
         RunState.TIMED_OUT, settings={"max_resubmits": 1}, starts=["start 1", "start 2"],
         detail="max_resubmits allows: resume it"),
    Case("a scheduler's requeue is a new attempt, not a retry, and nothing is stopped",
         [FakeNode(requeued={1: "requeued by SLURM (by an operator)"}, exits={1: None, 2: 0}),
          FakeNode(requeued={1: "requeued by SLURM (by an operator)"}, exits={1: None, 2: 0})], RunState.SUCCEEDED,
         starts=["start 1", "start 2"], detail="attempt 2: requeued by SLURM (by an operator)", stopped=False),
    Case("the node the scheduler saw die is the root cause, a survivor's error its consequence",
         [FakeNode(exits={1: 1}, log=b"RuntimeError: Connection closed by peer [10.0.0.2]\n"),
          FakeNode(exits={1: None})], RunState.FAILED,
         cause=SchedulerCause(1, "n2", "killed", "srun: error: n2: task 1: Killed"),
         triage={"node_rank": 1, "signature": "killed", "excerpt": "srun: error: n2: task 1: Killed"},
         detail="node 0: python_error"),
    Case("the scheduler's words on the node the log blames too keep the log's line",
         [FakeNode(exits={1: None}), FakeNode(exits={1: 3}, log=b"ValueError: bad shape\n")], RunState.FAILED,
         cause=SchedulerCause(1, "n2", "exited", "srun: error: n2: task 1: Exited with exit code 3"),
         triage={"node_rank": 1, "signature": "python_error",
                 "scheduler": "srun: error: n2: task 1: Exited with exit code 3"}),
    Case("a node that cannot be prepared stops nothing", [FakeNode(), FakeNode()], RunState.FAILED,
         prepare_error="node 1 (fake): cannot write /nodes: Permission denied", starts=[],
         detail="Permission denied", stopped=False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_policy(case: Case, tmp_path):
    run_case(case, tmp_path)


def test_a_run_adopted_after_its_job_ended_records_when_the_job_ended(tmp_path):
    plan = fake_plan(2)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "h0", 1: "h1"}, parse_logs=None)
    nodes = [FakeNode(polls_before_exit=0, ended_at=1000.0), FakeNode(polls_before_exit=0, ended_at=1002.5)]
    backend = FakeBackend(plan, nodes, running_attempt=1)
    policy = RunPolicy(backend, rec, Settings(**FAST), secrets=dict, cancel_requested=lambda: False)
    outcome = asyncio.run(policy.run(adopted=True))
    assert outcome.state == RunState.SUCCEEDED and policy.ended_at == 1002.5
    rec.finished(outcome.state, 0, None, at=policy.ended_at)
    assert store.get_run(plan.run_id).summary.ended_at == 1002.5
    live = RunPolicy(FakeBackend(plan, [FakeNode(), FakeNode()]), rec, Settings(**FAST), secrets=dict,
                     cancel_requested=lambda: False)
    assert asyncio.run(live.run()).state == RunState.SUCCEEDED and live.ended_at is None  # watched to its end


def test_node_output_is_mirrored_byte_for_byte_and_metrics_recorded(tmp_path):
    from trainer.wire.protocol import MetricRecord

    plan = fake_plan(2)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "h0", 1: "h1"}, parse_logs=None)
    log0 = b"\x1b[31mred\x1b[0m line\r\nprogress 10%\rprogress 20%\n" + bytes(range(256)) + b"\npartial"
    metrics = "".join(MetricRecord(step=s, loss=1.0 / s, max_steps=3).to_json() + "\n" for s in (1, 2, 3)).encode()
    samples = b'{"step":0,"samples":[{"prompt":"hi","answer":"\\u001b]0;owned\\u0007yes"}]}\n{"step":5'
    nodes = [FakeNode(log=log0, metrics=metrics, samples=samples), FakeNode(log=b"node 1\n")]
    backend = FakeBackend(plan, nodes)
    policy = RunPolicy(backend, rec, Settings(**FAST), secrets=dict, cancel_requested=lambda: False)
    assert asyncio.run(policy.run()).state == RunState.SUCCEEDED
    directory = tmp_path / "runs" / plan.run_id
    assert (directory / "nodes" / "0.log").read_bytes() == log0
    assert (directory / "nodes" / "1.log").read_bytes() == b"node 1\n"
    assert (directory / "metrics.jsonl").read_bytes() == metrics
    assert (directory / "samples.jsonl").read_bytes() == samples  # as the node wrote it, torn line and all
    from launcher.runs.core.samples import read_samples

    assert [(s.step, s.samples[0].answer) for s in read_samples(directory)] == [(0, "yes")]  # decoded once, clean
    summary = store.get_run(plan.run_id).summary
    assert summary.step == 3 and summary.max_steps == 3 and summary.last_loss == pytest.approx(1 / 3)


def test_a_run_that_stops_stepping_is_flagged_stalled_and_its_stacks_are_kept(tmp_path):
    plan = fake_plan(2)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "h0", 1: "h1"}, parse_logs=None)
    nodes = [FakeNode(exits={1: None}, hang_at_step=5), FakeNode(exits={1: None})]
    backend = FakeBackend(plan, nodes)
    asked = {"stacks": False}

    def stacks_requested() -> bool:  # someone presses s once the run is flagged
        if policy.stalls.stalled and not asked["stacks"]:
            asked["stacks"] = True
            return True
        return False

    def cancel() -> bool:
        return asked["stacks"] and nodes[0].polls > 40

    settings = Settings(**{**FAST, "poll_s": 0.01, "stall_factor": 3.0, "stall_min_s": 0.2})
    policy = RunPolicy(backend, rec, settings, secrets=dict, cancel_requested=cancel,
                       stacks_requested=stacks_requested, clock=backend.poll_clock(rank=0))
    # Node 0's script makes one step per poll of it: its polls are the run's time, however late the
    # other node's reads or the machine's load put them.
    outcome = asyncio.run(asyncio.wait_for(policy.run(), 20))
    assert outcome.state == RunState.CANCELLED
    assert outcome.triage.signature == "stalled" and "stalled at step 5" in outcome.triage.summary
    details = [t[3] for t in store.get_run(plan.run_id).transitions]
    assert any(d.startswith("stalled at step 5: no step for") for d in details), details
    events = [json.loads(x) for x in (tmp_path / "runs" / plan.run_id / "events.jsonl").read_text().splitlines()]
    dumps = [e for e in events if e["type"] == "StacksDumped"]
    assert [d["node_rank"] for d in dumps] == [0, 1]
    assert "hang_forever (train.py:7)" in Path(dumps[1]["path"]).read_text()


def test_a_queued_job_is_pending_then_running_and_its_timeout_counts_from_its_start(tmp_path):
    plan = fake_plan(2)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "h0", 1: "h1"}, parse_logs=None)
    # Queued longer than the timeout: only time on the nodes counts, so it still succeeds.
    nodes = [FakeNode(queued_polls={1: 30}, polls_before_exit=3), FakeNode(queued_polls={1: 30},
                                                                           polls_before_exit=3)]
    settings = Settings(**{**FAST, "poll_s": 0.01, "min_round_s": 0.01, "timeout_s": 0.25})
    backend = FakeBackend(plan, nodes)  # 60 polls queued: 0.6 s on the policy's clock
    policy = RunPolicy(backend, rec, settings, secrets=dict, cancel_requested=lambda: False,
                       clock=backend.poll_clock())
    assert asyncio.run(asyncio.wait_for(policy.run(), 10)).state == RunState.SUCCEEDED
    states = [(t[1], t[3]) for t in store.get_run(plan.run_id).transitions]
    pending = states.index(("pending", "queued (pending: Resources)"))
    assert ("running", "the job has its nodes") in states[pending:], states
    record = store.get_run(plan.run_id)
    began = next(t[0] for t in record.transitions if t[3] == "the job has its nodes")
    assert record.summary.started_at == began  # elapsed counts from the start, not the submission


def test_a_forced_run_says_what_it_ran_without_even_when_it_succeeds(tmp_path):
    from launcher.runs.owner.recorder import FORCED_NOTE

    [forced] = [c for c in CASES if c.name == "--force starts it anyway"]
    plan = fake_plan(1, gpus=True)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "experiment_name: fake\n")
    rec = Recorder(store, plan.run_id, {0: "h0"}, parse_logs=None)
    backend = FakeBackend(plan, [FakeNode()], probe_facts=forced.probe_facts)
    policy = RunPolicy(backend, rec, Settings(**{**FAST, "preflight": False}), secrets=dict, cancel_requested=bool)
    outcome = asyncio.run(asyncio.wait_for(policy.run(adopted=False), 10))
    rec.finished(outcome.state, outcome.exit_code, outcome.triage)
    summary = store.get_run(plan.run_id).summary
    assert summary.state == RunState.SUCCEEDED and summary.detail.startswith(FORCED_NOTE), summary.detail
    assert "gpus" in summary.detail and "GPU" in summary.detail
    # A new owner (the run adopted after its supervisor died) still knows it.
    assert Recorder(store, plan.run_id, {0: "h0"}, parse_logs=None).forced == summary.detail


def test_no_rank_is_called_hung_while_a_nodes_link_is_down(tmp_path):
    """Steps not seen are not steps not made: while a node reconnects the stall watch waits."""
    from launcher.backends.base import LinkState

    plan = fake_plan(2)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "h0", 1: "h1"}, parse_logs=None)
    now = [0.0]
    policy = RunPolicy(FakeBackend(plan, [FakeNode(), FakeNode()]), rec,
                       Settings(**{**FAST, "stall_factor": 3.0, "stall_min_s": 1.0}), secrets=dict,
                       cancel_requested=lambda: False, clock=lambda: now[0])
    for step in range(1, 6):
        policy.stalls.watch.saw_step(step, float(step))
    now[0] = 60.0
    policy.on_link(1, LinkState.RECONNECTING, "connection dropped; reconnecting")
    policy.stalls.saw_progress(policy.clock(), bool(policy.reconnecting))
    assert policy.stalls.stalled is None
    policy.on_link(1, LinkState.OK, "reconnected")
    policy.stalls.saw_progress(policy.clock(), bool(policy.reconnecting))
    assert policy.stalls.stalled is not None and policy.stalls.stalled.startswith("stalled at step 5")


@pytest.mark.parametrize(("compute", "port"), [
    ("{procs_per_node: 2}", 41234),  # this machine alone: the port the system picks
    ("{hosts: [localhost]}", 41234),
    ("{procs_per_node: 2, master_port: 29600}", 29600),  # pinned by the workload
    ("{hosts: [h0]}", 29500),  # another machine: the default, checked free there
], ids=["this-machine", "localhost", "pinned", "ssh"])
def test_the_rendezvous_port_a_run_takes(compute, port, tmp_path):
    result = validate_text(f"experiment_name: fake\ncompute: {compute}\ncommand: run\n", "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    plan = build_plan(result.workload, run_id="run-fake", node_root="/nodes")
    store = RunStore(tmp_path)
    store.create_run(plan, None, "x")
    rec = Recorder(store, plan.run_id, {0: "n0"}, parse_logs=None)
    backend = FakeBackend(plan, [FakeNode()])
    told = []
    policy = RunPolicy(backend, rec, Settings(**FAST), secrets=dict, cancel_requested=lambda: False,
                       on_plan=told.append)
    assert asyncio.run(asyncio.wait_for(policy.run(), 10)).state == RunState.SUCCEEDED
    [final] = told
    assert final.master_port == port and final.nodes[0].env["MASTER_PORT"] == str(port)
