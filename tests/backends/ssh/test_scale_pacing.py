"""The launcher at 64 nodes, without processes: SSH connections opened at most ``CONNECT_AT_ONCE`` at a
time, a dead host holding up only itself, and the run policy naming the one node that failed among 64
(the fake backend). The real thing on 32 hosts is tests/backends/ssh/test_scale.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from launcher.backends.ssh.pacing import CONNECT_AT_ONCE, ConnectGate
from launcher.events import NodeState, RunState
from launcher.workload.plan import build_plan
from launcher.workload.validate import validate_text
from tests.support.fake_backend import FakeNode
from tests.support.policy_cases import Case, run_case


def _ssh_plan(count: int, one_host: bool = False):
    hosts = ", ".join("login" if one_host else f"h{i}" for i in range(count))
    result = validate_text(f"experiment_name: wide\ncompute: {{hosts: [{hosts}]}}\ncommand: run\n", "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id="run-wide", node_root="/nodes")


@dataclass
class Opening:
    name: str
    hosts: int
    dead: set[int]
    most: int
    """How many connections were being opened at once, at most."""


OPENINGS = [
    Opening("a few hosts open all at once", 8, set(), 8),
    Opening("64 hosts open 16 at a time", 64, set(), CONNECT_AT_ONCE),
    Opening("a dead host among 32 holds one slot, the others go on", 32, {5}, CONNECT_AT_ONCE),
    Opening("three dead hosts among 64", 64, {0, 31, 63}, CONNECT_AT_ONCE),
]


class FakeConn:
    def close(self) -> None:
        pass


@pytest.mark.parametrize("case", OPENINGS, ids=[c.name for c in OPENINGS])
def test_the_editors_glance_opens_connections_bounded_and_a_dead_host_holds_up_only_itself(case, monkeypatch):
    """``reach`` (the editor's glance, ``launch``'s check) on every node at once: a dead host answers
    after its own timeout; every live host answered before that, whatever its place in the queue."""
    # The channel module first (before the patch): it binds ``connect`` by name when first imported, and
    # building the fleet below would import it with the fake bound for good.
    import launcher.backends.ssh.channel  # noqa: F401
    import launcher.backends.ssh.connect as connect_module
    from launcher.backends.fleet import AgentFleet

    answered: list[int] = []

    async def connect(host, ssh):
        rank = int(host.display.removeprefix("h"))
        if rank in case.dead:
            await asyncio.Event().wait()  # a blackholed host: no answer, ever
        await asyncio.sleep(0.001)
        answered.append(rank)
        return FakeConn()

    monkeypatch.setattr(connect_module, "connect", connect)
    fleet = AgentFleet(_ssh_plan(case.hosts))

    async def glance():
        return await asyncio.gather(*(fleet.reach(r, timeout_s=0.5) for r in range(case.hosts)))

    reaches = asyncio.run(glance())
    assert fleet.gate.most == case.most
    assert {r.rank for r in reaches if not r.ok} == case.dead
    for r in reaches:
        assert r.ok or ("no answer within" in r.detail and r.label == f"node {r.rank} (h{r.rank})"), r
    assert sorted(answered) == sorted(set(range(case.hosts)) - case.dead)


def test_agent_links_open_through_the_same_bound(monkeypatch):
    """A launch (or a cancel, or reconnects after a blip) opens each node's agent channel through the gate."""
    import launcher.backends.ssh.channel as channel_module
    from launcher.backends.fleet import AgentFleet

    async def open_ssh(host, ssh, python, node_dir):
        await asyncio.sleep(0.001)
        return host.display

    monkeypatch.setattr(channel_module, "open_ssh", open_ssh)
    fleet = AgentFleet(_ssh_plan(64))

    async def open_all():
        return await asyncio.gather(*(link.opener() for link in fleet.links))

    assert asyncio.run(open_all()) == [f"h{i}" for i in range(64)]
    assert fleet.gate.most == CONNECT_AT_ONCE


def test_connections_to_one_host_open_at_most_8_at_once(monkeypatch):
    """Every node reached through one machine (a SLURM login node): under OpenSSH's ``MaxStartups 10``."""
    import launcher.backends.ssh.channel as channel_module
    from launcher.backends.fleet import AgentFleet
    from launcher.backends.ssh.pacing import PER_HOST_AT_ONCE

    async def open_ssh(host, ssh, python, node_dir):
        await asyncio.sleep(0.001)
        return node_dir

    monkeypatch.setattr(channel_module, "open_ssh", open_ssh)
    fleet = AgentFleet(_ssh_plan(32, one_host=True))

    async def open_all():
        return await asyncio.gather(*(link.opener() for link in fleet.links))

    assert len(set(asyncio.run(open_all()))) == 32
    assert fleet.gate.most_to == {"login": PER_HOST_AT_ONCE} and fleet.gate.most == PER_HOST_AT_ONCE == 8


def test_a_gate_used_from_a_second_event_loop_works_there():
    """A backend made in one loop and used in another (the app's workers) gets a fresh bound there."""
    gate = ConnectGate(limit=2)

    async def burst():
        async def one():
            await asyncio.sleep(0.001)
        await asyncio.gather(*(gate.through(one) for _ in range(6)))

    asyncio.run(burst())
    asyncio.run(burst())
    assert gate.most == 2 and gate.opening == 0


def _wide(count: int, **odd) -> list[FakeNode]:
    """``count`` nodes that run until stopped; ``odd``: ``node_<rank>=FakeNode(...)``."""
    nodes = [FakeNode(exits={1: None}) for _ in range(count)]
    for key, node in odd.items():
        nodes[int(key.removeprefix("node_"))] = node
    return nodes


WIDE = [
    Case("64 nodes that all exit 0", [FakeNode() for _ in range(64)], RunState.SUCCEEDED, starts=["start 1"],
         node_states=dict.fromkeys(range(64), NodeState.EXITED), stopped=False),
    Case("one failing node of 64 is named and the 63 others are stopped",
         _wide(64, node_41=FakeNode(exits={1: 3})), RunState.FAILED,
         node_states={**dict.fromkeys(range(64), NodeState.STOPPED), 41: NodeState.EXITED},
         detail="node 41 (h41) exited with code 3", stopped=True),
    Case("one lost node of 64 is named and the others are stopped",
         _wide(64, node_9=FakeNode(exits={1: None}, lost_after_polls=3)), RunState.FAILED,
         node_states={**dict.fromkeys(range(64), NodeState.STOPPED), 9: NodeState.LOST},
         detail="node 9 (fake): lost", stopped=True),
    Case("one node of 64 that cannot start is named", _wide(64, node_50=FakeNode(start_error="no torchrun")),
         RunState.FAILED, detail="node 50 (fake): no torchrun", stopped=True,
         triage={"node_rank": 50, "signature": "launch"}),
]


@pytest.mark.parametrize("case", WIDE, ids=[c.name for c in WIDE])
def test_the_run_policy_at_64_nodes(case, tmp_path):
    run_case(case, tmp_path)


@pytest.mark.parametrize(("nodes", "factor"), [(1, 1.0), (2, 1.0), (16, 1.0), (32, 2.0), (64, 4.0), (128, 8.0)])
def test_each_node_is_read_less_often_past_16_nodes(nodes, factor):
    from launcher.runs.owner.settings import pace

    assert pace(nodes) == factor
