"""A node fails and the run goes on: the run policy with its :class:`NodeRecovery` against fake backends, one
per node set (a swap's nodes get a backend of their own, as the supervisor's ``backend_for`` gives them).
Each case runs in milliseconds; the real parts (namespace hosts, torchrun, SLURM) are in
``test_recovery_runs.py``."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import pytest

from launcher.backends.base import SchedulerCause
from launcher.events import RunState
from launcher.runs.core import quarantine
from launcher.runs.core.layout import read_swaps
from launcher.runs.core.store import RunStore
from launcher.runs.owner.policy import RunPolicy
from launcher.runs.owner.recorder import Recorder
from launcher.runs.owner.recovery import NodeRecovery
from launcher.runs.owner.settings import Settings
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from tests.support.fake_backend import FakeBackend, FakeNode
from trainer.wire.protocol import MetricRecord, ResumeCheck

FAST = {"poll_s": 0.001, "min_round_s": 0.0, "gpu_poll_s": 0.0, "stop_grace_s": 0.0}
GOOD = {"python": {"version": [3, 11, 7]}, "gpus": {"smi": None, "names": []},
        "packages": {"torch": {"version": "2.13.0+cpu"}},
        "disk": {"path": "/nodes", "existing": "/", "free_bytes": 2**40}, "master": {}}
"""What the doctor's probe finds on a healthy CPU node."""
SMI_FAILS = {**GOOD, "gpus": {"smi": "/usr/bin/nvidia-smi", "error": "Unable to determine the device handle for "
                              "GPU0000:3B:00.0: GPU is lost. Reboot the system to recover this GPU"}}
OLD_PYTHON = {**GOOD, "python": {"version": [3, 8, 10]}}
H100 = ("H100",)


def _metrics(*records: MetricRecord) -> bytes:
    return "".join(r.to_json() + "\n" for r in records).encode()


def _train(*steps: int, at: float = 1000.0) -> bytes:
    return _metrics(*(MetricRecord(step=s, loss=2.0 - s / 100, time=at + s) for s in steps))


def _check(verdict: str, step: int, from_step: int, differs: tuple[str, ...] = ()) -> bytes:
    return _metrics(ResumeCheck(verdict, step, from_step=from_step, world_before=2, world_after=2,
                                checked=("step", "seed"), differs=differs).record())


JUMP = ("loss: 1.96 at the first step, 1.97 before the stop (a change of 0.4; flagged past 0.1)",)


@dataclass
class Case:
    name: str
    hosts: dict[str, FakeNode]
    """Every machine by name: the nodes first (``compute.hosts`` in order), then the spares."""
    nodes: int
    expect: RunState
    spares: int = 0
    recovery: str = ""
    """``recovery:`` flow mapping text (default: the model's)."""
    settings: dict = field(default_factory=dict)
    cause: SchedulerCause | None = None
    slurm: bool = False
    quarantined: tuple[str, ...] = ()
    starts: dict[str, list[str]] = field(default_factory=dict)
    """Per host, the attempts started there."""
    hosts_after: list[str] | None = None
    """The run's nodes when it ended."""
    swaps: list[dict] | None = None
    """Entries each swap of the record must have (``None``: no check; ``[]``: none)."""
    said: str = ""
    """Words the run's transitions or triage must contain."""
    failures: dict[str, int] = field(default_factory=dict)
    """Failures counted towards each host's quarantine."""
    checks_resume: bool = True
    """The run's trainer checks its resumes (the built-in trainer; the fake workloads stand in for it)."""


def _h(**kw) -> FakeNode:
    return FakeNode(probe_facts=GOOD, **kw)


CASES = [
    Case("a node whose processes are killed is replaced by a spare, and the run succeeds (no retry spent)",
         {"h0": _h(exits={1: None, 2: 0}, metrics_of={1: _train(1, 2, 3), 2: _check("verified", 3, 2) + _train(3, 4)}),
          "h1": _h(exits={1: -9}, polls_before_exit=3), "s0": _h(exits={2: 0})}, 2, RunState.SUCCEEDED, spares=1,
         starts={"h0": [1, 2], "h1": [1], "s0": [2]}, hosts_after=["h0", "s0"],
         swaps=[{"kind": "spare", "node_rank": 1, "failed_host": "h1", "signature": "killed", "replacement": "s0",
                 "attempt": 2, "verdict": "verified", "resumed_step": 3, "failed_step": 3, "recovered": True}],
         said="recovered: node 1 (h1) killed at step 3; replaced by s0; resumed verified at step", failures={"h1": 1}),
    Case("a loss jump the resume check flags is the run's own when that step gave the same loss before the failure",
         {"h0": _h(exits={1: None, 2: 0}, metrics_of={1: _train(1, 2, 3, 4), 2: _train(4, 5) + _check("differs", 4, 3, JUMP)}),
          "h1": _h(exits={1: -9}), "s0": _h(exits={2: 0})}, 2, RunState.SUCCEEDED, spares=1,
         swaps=[{"verdict": "verified", "recovered": True, "differs": [],
                 "loss_note": "the first step's loss 1.96 is the loss step 4 gave before the failure (1.96): the jump "
                              "the resume check saw is the run's own"}]),
    Case("a loss the run did not give before the failure leaves the swap NOT verified, said",
         {"h0": _h(exits={1: None, 2: 0}, metrics_of={1: _train(1, 2, 3, 4),
                                                      2: _metrics(MetricRecord(step=4, loss=9.0, time=5.0))
                                                      + _check("differs", 4, 3, JUMP)}),
          "h1": _h(exits={1: -9}), "s0": _h(exits={2: 0})}, 2, RunState.SUCCEEDED, spares=1,
         swaps=[{"verdict": "differs", "recovered": False, "loss_note": ""}], said="swap NOT verified: node 1 (h1)"),
    Case("a workload's own command: its first step after the swap settles it, its resume unchecked (nothing proves it)",
         {"h0": _h(exits={1: None, 2: 0}, metrics_of={2: _train(7)}), "h1": _h(exits={1: -9}), "s0": _h(exits={2: 0})},
         2, RunState.SUCCEEDED, spares=1, checks_resume=False,
         swaps=[{"verdict": "unchecked", "recovered": False, "resumed_step": 7}],
         said="went on unchecked: node 1 (h1) killed; replaced by s0; went on, first step after"),
    Case("a failure in the user's code swaps nothing: no spare is asked, the usual retries apply",
         {"h0": _h(exits={1: None, 2: 0}), "h1": _h(exits={1: 1, 2: 0}, log=b"ValueError: bad shape\n"),
          "s0": _h()}, 2, RunState.SUCCEEDED, spares=1, settings={"max_retries": 1},
         starts={"h0": [1, 2], "h1": [1, 2], "s0": []}, hosts_after=["h0", "h1"], swaps=[]),
    Case("the same failure without retries fails the run, naming the code, not the node",
         {"h0": _h(exits={1: None}), "h1": _h(exits={1: 1}, log=b"ValueError: bad shape\n"), "s0": _h()}, 2,
         RunState.FAILED, spares=1, starts={"s0": []}, swaps=[], said="python_error"),
    Case("a lost node is replaced by a spare",
         {"h0": _h(exits={1: None, 2: 0}, metrics_of={2: _train(1, 2)}), "h1": _h(exits={1: None}, lost_after_polls=3),
          "s0": _h(exits={2: 0})},
         2, RunState.SUCCEEDED, spares=1, starts={"h0": [1, 2], "s0": [2]}, hosts_after=["h0", "s0"],
         swaps=[{"kind": "spare", "signature": "lost", "node_rank": 1, "verdict": "none"}],
         said="node 1 (h1) lost; replaced by s0; started again from step 0"),
    Case("node 0 lost: the spare takes rank 0, the rendezvous moves there, its metrics are read from their start",
         {"h0": _h(exits={1: None}, lost_after_polls=3, metrics_of={1: _train(1, 2, 3)}),
          "h1": _h(exits={1: None, 2: 0}),
          "s0": _h(exits={2: 0}, metrics_of={2: _train(3, 4) + _check("verified", 3, 2)})},
         2, RunState.SUCCEEDED, spares=1, hosts_after=["s0", "h1"],
         swaps=[{"node_rank": 0, "replacement": "s0", "verdict": "verified", "resumed_step": 3}]),
    Case("a spare that fails the doctor is skipped and said; the next one takes the place",
         {"h0": _h(exits={1: None, 2: 0}), "h1": _h(exits={1: -9}), "s0": FakeNode(probe_facts=SMI_FAILS),
          "s1": _h(exits={2: 0})}, 2, RunState.SUCCEEDED, spares=2, starts={"s0": [], "s1": [2]},
         hosts_after=["h0", "s1"], swaps=[{"replacement": "s1"}],
         said="spare s0 skipped: it fails the doctor (gpus: nvidia-smi failed", failures={"h1": 1, "s0": 1}),
    Case("a spare that cannot be reached or runs too old a Python is no spare",
         {"h0": _h(exits={1: None}), "h1": _h(exits={1: -9}), "s0": FakeNode(unreachable="connection refused"),
          "s1": FakeNode(probe_facts=OLD_PYTHON)}, 2, RunState.FAILED, spares=2, starts={"s0": [], "s1": []},
         swaps=[], said="no spare can take its place (s0: doctor: reachable: node 1 (fake): connection refused; "
                        "s1: doctor: python", failures={"h1": 1, "s0": 1, "s1": 1}),
    Case("a quarantined spare is passed over without a probe",
         {"h0": _h(exits={1: None, 2: 0}), "h1": _h(exits={1: -9}), "s0": _h(), "s1": _h(exits={2: 0})}, 2,
         RunState.SUCCEEDED, spares=2, quarantined=("s0",), starts={"s0": [], "s1": [2]},
         swaps=[{"replacement": "s1", "skipped": ["s0: quarantined (2 failures; fsdp-tui quarantine lift s0)"]}]),
    Case("no spare left: a lost node fails the run as before, named",
         {"h0": _h(exits={1: None}), "h1": _h(exits={1: None}, lost_after_polls=3)}, 2, RunState.FAILED,
         swaps=[], said="node 1 (fake): lost"),
    Case("max_swaps bounds the swaps: a second failure fails the run",
         {"h0": _h(exits={1: None, 2: None}), "h1": _h(exits={1: -9}), "s0": _h(exits={2: -9}), "s1": _h()}, 2,
         RunState.FAILED, spares=2, recovery="{max_swaps: 1}", starts={"s1": []},
         swaps=[{"replacement": "s0"}], said="killed"),
    Case("max_swaps 0: spares unused, a failed node fails the run",
         {"h0": _h(exits={1: None}), "h1": _h(exits={1: -9}), "s0": _h()}, 2, RunState.FAILED, spares=1,
         recovery="{max_swaps: 0}", starts={"s0": []}, swaps=[], failures={}),
    Case("two swaps in one run, each recorded, each host counted",
         {"h0": _h(exits={1: None, 2: None, 3: 0}), "h1": _h(exits={1: -9}), "s0": _h(exits={2: -9}),
          "s1": _h(exits={3: 0})}, 2, RunState.SUCCEEDED, spares=2, hosts_after=["h0", "s1"],
         swaps=[{"number": 1, "failed_host": "h1", "replacement": "s0"}, {"number": 2, "failed_host": "s0",
                                                                           "replacement": "s1", "attempt": 3}],
         failures={"h1": 1, "s0": 1}),
    Case("a node whose GPU falls off the bus is stopped with the others and replaced (mocked GPUs)",
         {"h0": _h(exits={1: None, 2: 0}, gpus=H100), "h1": _h(exits={1: None}, gpus=H100, gpus_gone_after_polls=4),
          "s0": _h(exits={2: 0})}, 2, RunState.SUCCEEDED, spares=1, hosts_after=["h0", "s0"],
         swaps=[{"signature": "gpu_lost", "node_rank": 1}], said="lost its GPU: nvidia-smi listed 1 and now lists none"),
    Case("recovery.shrink: no spare, the run goes on without the failed node, the nodes after it move up",
         {"h0": _h(exits={1: None, 2: 0}), "h1": _h(exits={1: -9}), "h2": _h(exits={1: None, 2: 0})}, 3,
         RunState.SUCCEEDED, recovery="{shrink: true}", starts={"h0": [1, 2], "h1": [1], "h2": [1, 2]},
         hosts_after=["h0", "h2"], swaps=[{"kind": "shrink", "node_rank": 1, "replacement": ""}],
         said="the run went on without it"),
    Case("spares first, then shrink once they are used up",
         {"h0": _h(exits={1: None, 2: None, 3: 0}), "h1": _h(exits={1: -9}), "h2": _h(exits={1: None, 2: None, 3: 0}),
          "s0": _h(exits={2: -9})}, 3, RunState.SUCCEEDED, spares=1, recovery="{shrink: true, max_swaps: 3}",
         hosts_after=["h0", "h2"], swaps=[{"kind": "spare"}, {"kind": "shrink", "node_rank": 1}]),
    Case("SLURM: the node SLURM saw fail is excluded from the next job, which gets another in its place",
         {"h0": _h(exits={1: 1, 2: 0}, log=b"RuntimeError: Connection closed by peer\n"), "h1": _h(exits={1: None, 2: 0})},
         2, RunState.SUCCEEDED, slurm=True, recovery="{max_swaps: 1}",
         cause=SchedulerCause(1, "fsl-n1", "node_fail", "slurmstepd: error: *** JOB 12 ON fsl-n0 CANCELLED DUE TO NODE "
                                                        "FAILURE, node fsl-n1 ***"),
         swaps=[{"kind": "exclude", "signature": "node_fail", "node_rank": 1, "failed_host": "fsl-n1"}],
         said="node 1 (fsl-n1) failed; excluded, the next job gets another node in its place"),
    Case("SLURM with recovery.shrink: the failed node excluded and the next job one node smaller",
         {"h0": _h(exits={1: 1, 2: 0}, log=b"RuntimeError: Connection closed by peer\n"), "h1": _h(exits={1: None}),
          "h2": _h(exits={1: None, 2: 0})},
         3, RunState.SUCCEEDED, slurm=True, recovery="{max_swaps: 1, shrink: true}",
         cause=SchedulerCause(1, "fsl-n1", "killed", "srun: error: fsl-n1: task 1: Killed"),
         swaps=[{"kind": "shrink", "signature": "killed", "replacement": "fsl-n1 excluded",
                 "hosts_after": ["SLURM node 0 via this machine", "SLURM node 1 via this machine"]}],
         said="node 1 (fsl-n1) killed; fsl-n1 excluded, the run went on without it"),
    Case("SLURM without recovery.max_swaps: a failed node fails the run as before (the scheduler's root cause)",
         {"h0": _h(exits={1: 1}, log=b"RuntimeError: Connection closed by peer\n"), "h1": _h(exits={1: None})},
         2, RunState.FAILED, slurm=True,
         cause=SchedulerCause(1, "fsl-n1", "node_fail", "slurmstepd: error: *** JOB 12 ON fsl-n0 CANCELLED DUE TO NODE "
                                                        "FAILURE, node fsl-n1 ***"),
         swaps=[], said="\"node_rank\": 1, \"rank\": null, \"exit_code\": null, \"signature\": \"node_fail\""),
]


def _plan(case: Case):
    names = list(case.hosts)
    hosts, spares = names[:case.nodes], names[case.nodes:case.nodes + case.spares]
    recovery = f"recovery: {case.recovery}\n" if case.recovery else ""
    if case.slurm:
        compute = f"{{accelerator_type: CPU, procs_per_node: 1, num_accelerators: {case.nodes}, slurm: {{login: local}}}}"
    else:
        compute = (f"{{accelerator_type: CPU, procs_per_node: 1, num_accelerators: {case.nodes}, "
                   f"hosts: [{', '.join(hosts)}], spares: [{', '.join(spares)}]}}")
    text = (f"experiment_name: fake\ncompute: {compute}\ncommand: run\n{recovery}"
            "env_variables: {GLOO_SOCKET_IFNAME: eth0, NCCL_SOCKET_IFNAME: eth0}\n")
    result = validate_text(text, "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id="run-fake", node_root="/nodes")


def run_case(case: Case, home):
    plan = _plan(case)
    store = RunStore(home)
    store.create_run(plan, None, "experiment_name: fake\n")
    rec = Recorder(store, plan.run_id, {n.node_rank: n.host_display for n in plan.nodes}, parse_logs=None)
    for host in case.quarantined:
        for _ in range(2):
            quarantine.count_failure(home, host, "older-run", "lost", 2)
    backends: list[FakeBackend] = []

    def make(p, watch):
        nodes = [case.hosts[n.host_display] for n in p.nodes] if not case.slurm else list(case.hosts.values())
        b = FakeBackend(p, nodes, cause=case.cause if not backends else None)
        b.on_link = watch
        backends.append(b)
        return b

    recovery = NodeRecovery(rec, home, plan.run_id, plan.workload.recovery, plan.workload.swaps_allowed,
                            checks_resume=case.checks_resume)
    policy = RunPolicy(make(plan, None), rec, Settings(**{**FAST, **case.settings}), secrets=dict,
                       cancel_requested=lambda: False, recovery=recovery if plan.workload.swaps_allowed else None,
                       make_backend=make)
    backends[0].on_link = policy.on_link
    outcome = asyncio.run(asyncio.wait_for(policy.run(), 20))
    return outcome, policy, store, rec


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_recovery(case: Case, tmp_path):
    outcome, policy, store, rec = run_case(case, tmp_path)
    record = store.get_run("run-fake")
    said = " ".join(t[3] for t in record.transitions) + json.dumps(outcome.triage.to_dict() if outcome.triage else {})
    assert outcome.state == case.expect, said
    for host, attempts in case.starts.items():
        assert case.hosts[host].started == attempts, (host, case.hosts[host].started)
    if case.hosts_after is not None:
        assert [n.host_display for n in policy.backend.plan.nodes] == case.hosts_after
        assert [n.host for n in record.nodes] == case.hosts_after  # the store's node rows follow the swap
    swaps = read_swaps(rec.dir)
    if case.swaps is not None:
        assert len(swaps) == len(case.swaps), [s.words() for s in swaps]
        for swap, want in zip(swaps, case.swaps, strict=True):
            got = swap.to_dict()
            assert {k: got[k] for k in want} == want, got
    if case.said:
        assert case.said in said, said
    counted = {h.host: h.failures for h in quarantine.hosts(tmp_path) if h.host not in case.quarantined}
    if case.failures or case.swaps == []:
        assert counted == case.failures


def test_a_swapped_node_gets_a_directory_of_its_own_and_its_log_goes_on_in_the_record(tmp_path):
    """The spare works in ``node-1.1`` (the failed node may still hold ``node-1``); the record's copy of
    node 1's log keeps the failed node's lines and goes on with the spare's from its log's first byte."""
    case = CASES[0]
    case = Case(case.name, {"h0": _h(exits={1: None, 2: 0}, metrics_of={2: _train(1)}),
                            "h1": _h(exits={1: -9}, log=b"h1 line\n"),
                            "s0": _h(exits={2: 0}, log=b"s0 line\n")}, 2, RunState.SUCCEEDED, spares=1)
    outcome, policy, store, rec = run_case(case, tmp_path)
    assert outcome.state == RunState.SUCCEEDED
    assert [n.node_dir for n in policy.backend.plan.nodes] == ["/nodes/run-fake/node-0", "/nodes/run-fake/node-1.1"]
    assert (rec.dir / "nodes" / "1.log").read_bytes() == b"h1 line\ns0 line\n"
    plan = json.loads((rec.dir / "plan.json").read_text()) if (rec.dir / "plan.json").exists() else None
    assert plan is None  # the fake policy has no on_plan: the supervisor's saves it (test_recovery_units)
    events = [json.loads(x) for x in (rec.dir / "events.jsonl").read_text().splitlines()]
    swapped = [e for e in events if e["type"] == "NodeSwapped"]
    assert [e["swap"]["verdict"] for e in swapped] == [None, "none"]  # decided, then settled
    assert read_swaps(rec.dir)[0].log_shift == {1: len(b"h1 line\n")}
