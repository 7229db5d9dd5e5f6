"""A launch's cheap checks before it records the run (``launch_refusals``): each node probed over the connection
that reached it, one SSH connection a node and no agent booted for it; the run's owner then does not probe the
nodes a second time (``checked``, tests/runs/owner/test_policy.py)."""

from __future__ import annotations

import asyncio
import sys

import pytest

pytestmark = pytest.mark.slow


def test_each_node_is_checked_over_the_one_connection_that_reached_it(home, tmp_path, hosts, monkeypatch):
    from launcher.backends.ssh import channel
    from launcher.backends.ssh import connect as connecting
    from launcher.runs.launch import launch_refusals
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    client, _ = hosts
    monkeypatch.setenv("HOME", str(client))
    nodes = tmp_path / "nodes"
    text = (f"experiment_name: checks\ncompute: {{hosts: [node0, node1]}}\nenvironment: {{python: {sys.executable}}}\n"
            f"ssh: {{remote_root: {nodes}}}\ncommand: echo never\nmlflow: {{enabled: false}}\n")
    result = validate_text(text, "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    plan = build_plan(result.workload, run_id="checks-run")
    opened: list[str] = []
    real = connecting.connect

    async def counted(host, ssh):
        opened.append(host.display)
        return await real(host, ssh)

    monkeypatch.setattr(connecting, "connect", counted)
    monkeypatch.setattr(channel, "connect", counted)
    said, checked = asyncio.run(launch_refusals(plan, home))
    assert said == [] and checked is True
    assert sorted(opened) == ["node0", "node1"], opened  # the reach's connection, used again for the probe
    assert not list(nodes.rglob("agent-*.zip")), "an agent was booted for the checks"

    said, checked = asyncio.run(launch_refusals(plan, home, force=True))  # --force: no checks, none recorded
    assert said == [] and checked is False
