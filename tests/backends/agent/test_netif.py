"""The node finds the interface that reaches MASTER_ADDR for gloo and NCCL; what the workload or the node
already set stays (the agent's ``netif``, stdlib only)."""

import pytest

from launcher.backends.agent.netif import IFACE_ENV, fill_iface_env, route_interface
from launcher.workload.plan import IFACE_ENV as PLANNED


def test_the_route_to_a_loopback_rendezvous_is_lo_and_an_unknown_name_says_why():
    assert route_interface("127.0.0.1") == {"iface": "lo", "local": "127.0.0.1"}
    assert "no route to no-such-host.invalid" in route_interface("no-such-host.invalid")["error"]


@pytest.mark.parametrize(("env", "names", "expected"), [
    ({"MASTER_ADDR": "127.0.0.1"}, IFACE_ENV, {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}),
    ({"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "ib0"}, IFACE_ENV,
     {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "lo"}),  # the node's own setting stays
    ({"MASTER_ADDR": "127.0.0.1"}, (), {}),  # one node: nothing asked
    ({"MASTER_ADDR": "no-such-host.invalid"}, IFACE_ENV, {}),  # nothing found: nothing set (the doctor says why)
    ({}, IFACE_ENV, {}),
])
def test_fill_sets_only_the_missing_names(env, names, expected):
    env = dict(env)
    fill_iface_env(env, names)
    assert {k: v for k, v in env.items() if k in IFACE_ENV} == expected


def test_the_plan_and_the_agent_name_the_same_variables():
    assert PLANNED == IFACE_ENV
