"""A launch before it records the run: its cheap checks (``launch_refusals``) probe each node over the connection
that reached it, one SSH connection a node and no agent booted for it (the run's owner then does not probe the
nodes a second time: ``checked``, tests/runs/owner/test_policy.py), while the run's owner starts
(:class:`launcher.runs.core.ownership.WarmOwner`)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_each_node_is_checked_over_the_one_connection_that_reached_it(home, tmp_path, hosts, monkeypatch):
    from launcher.backends.ssh import channel
    from launcher.backends.ssh import connect as connecting
    from launcher.runs.launch_checks import launch_refusals
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


def _cmdline(pid: int) -> list[bytes]:
    try:
        return (Path(f"/proc/{pid}/cmdline")).read_bytes().split(b"\0")
    except OSError:
        return []


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def test_the_owner_started_while_the_nodes_were_checked_takes_the_run_and_a_refusal_leaves_none(tmp_path,
                                                                                                 monkeypatch):
    """The run's owner is the process started before the run was recorded (its imports overlapped the checks):
    it holds the run's lock and writes its log; a refused launch's waiting process leaves, having done nothing; one
    that died before the run came is replaced by a new owner."""
    from launcher.api import Client
    from launcher.api.runs import Launched, Refused
    from launcher.paths import run_dir
    from launcher.runs.core import ownership
    from tests.support.cli import wait_until, write_workload

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("FSDP_TUI_HOME", str(home))
    started: list[ownership.WarmOwner] = []
    real = ownership.WarmOwner.__init__

    def kept(self) -> None:
        real(self)
        started.append(self)

    monkeypatch.setattr(ownership.WarmOwner, "__init__", kept)
    client = Client(home)
    refused = client.runs.launch(write_workload(tmp_path, (
        "experiment_name: warm\ncompute: {accelerator_type: CPU, procs_per_node: 1, num_accelerators: 1}\n"
        "secrets: {API_TOKEN: api/none}\ncommand: echo hi\nmlflow: {enabled: false}\n")))
    assert isinstance(refused, Refused) and refused.stage == "checks" and len(started) == 1
    wait_until(lambda: _gone(started[0].proc.pid), 60, "the refused launch's waiting owner to leave")
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())

    launched = client.runs.launch(write_workload(tmp_path, (
        "experiment_name: warm\ncompute: {accelerator_type: CPU, procs_per_node: 1, num_accelerators: 1}\n"
        "command: sleep 60\nmlflow: {enabled: false}\n")))
    assert isinstance(launched, Launched) and len(started) == 2
    warm = started[1].proc.pid
    assert b"launcher.runs.owner.warm" in _cmdline(warm)
    directory = run_dir(home, launched.run_id)
    wait_until(lambda: f"owner of {launched.run_id}: pid {warm}" in (directory / ownership.LOG_FILE).read_text(),
               60, "the warm process to say it owns the run")
    assert (directory / ownership.LOCK_FILE).read_text().split()[0] == str(warm)
    assert ownership.owned(home, launched.run_id)
    report = asyncio.run(client.runs.cancel(launched.run_id))
    assert not report.leftovers
    wait_until(lambda: _gone(warm), 60, "the owner to leave once the run ended")

    def died(self) -> None:  # the waiting process is gone before the run is recorded: a new owner takes it
        kept(self)
        self.proc.kill()
        self.proc.wait()

    monkeypatch.setattr(ownership.WarmOwner, "__init__", died)
    fallback = client.runs.launch(write_workload(tmp_path, (
        "experiment_name: warm\ncompute: {accelerator_type: CPU, procs_per_node: 1, num_accelerators: 1}\n"
        "command: sleep 60\nmlflow: {enabled: false}\n")))
    assert isinstance(fallback, Launched) and len(started) == 3
    directory = run_dir(home, fallback.run_id)
    wait_until(lambda: f"owner of {fallback.run_id}: pid" in (directory / ownership.LOG_FILE).read_text(),
               60, "a new owner to say it owns the run")
    pid = int((directory / ownership.LOCK_FILE).read_text().split()[0])
    assert pid != started[2].proc.pid and b"launcher.runs.owner.supervisor" in _cmdline(pid)
    assert ownership.owned(home, fallback.run_id)
    report = asyncio.run(client.runs.cancel(fallback.run_id))
    assert not report.leftovers
    wait_until(lambda: _gone(pid), 60, "the new owner to leave once the run ended")
