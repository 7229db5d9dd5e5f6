"""For the run policy's tests: a plan of fake hosts, the fast settings, and a case (nodes in, the run's end
and what it recorded out) run through the real policy against the fake backend."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

from launcher.backends.base import SchedulerCause
from launcher.events import NodeState, RunState
from launcher.runs.core.store import RunStore
from launcher.runs.owner.policy import RunPolicy
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.settings import Settings
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from tests.support.fake_backend import FakeBackend, FakeNode

FAST = {"poll_s": 0.001, "min_round_s": 0.0, "gpu_poll_s": 0.0, "stop_grace_s": 0.0}


def fake_plan(num_nodes: int, master_port: int | None = None, gpus: bool = False):
    hosts = ", ".join(f"h{i}" for i in range(num_nodes))
    port = f", master_port: {master_port}" if master_port else ""
    kind = ", accelerator_type: GPU_2xH100" if gpus else ""
    text = f"experiment_name: fake\ncompute: {{hosts: [{hosts}]{port}{kind}}}\ncommand: run\n"
    result = validate_text(text, "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id="run-fake", node_root="/nodes")


@dataclass
class Case:
    name: str
    nodes: list[FakeNode]
    expect: RunState
    settings: dict = field(default_factory=dict)
    cancel_after_polls: int | None = None
    adopted: bool = False
    running_attempt: int | None = None
    port_free: bool = True
    master_port: int | None = None
    prepare_error: str | None = None
    probe_facts: dict | None = None
    starts: list[str] | None = None
    """The start calls the backend saw."""
    node_states: dict[int, NodeState] | None = None
    """Each node's last recorded state."""
    detail: str = ""
    """Words the run's last transition (or its triage) must contain."""
    stopped: bool | None = None
    cause: SchedulerCause | None = None
    """What the scheduler says ended a failed attempt."""
    triage: dict | None = None
    """Entries the run's triage must have."""
    port_taken_starts: int = 0
    """Starts node 0 refuses: its rendezvous port was taken after the launch claimed it."""
    probes: int | None = None
    """The doctor's probes the backend ran (one a node for the cheap checks)."""


def run_case(case: Case, tmp_path: Path) -> None:
    """Run ``case``'s nodes through the real run policy against the fake backend and check what it expects."""
    plan = fake_plan(len(case.nodes), case.master_port, gpus=case.probe_facts is not None)
    store = RunStore(tmp_path)
    store.create_run(plan, None, "experiment_name: fake\n")
    rec = Recorder(store, plan.run_id, {n.node_rank: n.host_display for n in plan.nodes}, parse_logs=None)
    backend = FakeBackend(plan, case.nodes, port_free=case.port_free, prepare_error=case.prepare_error,
                          running_attempt=case.running_attempt, probe_facts=case.probe_facts, cause=case.cause,
                          port_taken_starts=case.port_taken_starts)

    def cancel() -> bool:
        return case.cancel_after_polls is not None and case.nodes[0].polls >= case.cancel_after_polls

    policy = RunPolicy(backend, rec, Settings(**{**FAST, **case.settings}), secrets=dict, cancel_requested=cancel)
    backend.on_link = policy.on_link
    outcome = asyncio.run(asyncio.wait_for(policy.run(adopted=case.adopted), 10))

    assert outcome.state == case.expect
    starts = [c for c in backend.calls if c.startswith("start")]
    if case.starts is not None:
        assert starts == case.starts
    if case.probes is not None:
        assert sum(call.startswith("probe") for call in backend.calls) == case.probes, backend.calls
    record = store.get_run(plan.run_id)
    if case.node_states is not None:
        assert {n.node_rank: n.state for n in record.nodes} == case.node_states
    if case.detail:
        said = " ".join(t[3] for t in record.transitions) + json.dumps(outcome.triage.to_dict() if outcome.triage else {})
        assert case.detail in said, said
    if case.stopped is not None:
        assert ("stop" in backend.calls) == case.stopped
    if case.triage is not None:
        assert {k: outcome.triage.to_dict().get(k) for k in case.triage} == case.triage, outcome.triage
