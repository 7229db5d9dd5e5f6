"""32 nodes over real SSH: 32 namespace hosts (one sshd each, one bridge), one short job on all of them from
one operator process. Longer figures (16, 32, 64 hosts) are benchmarks/bench_scale.py's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli_env, owner_pid, tagged, write_workload

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("scale32")]

HOSTS = 32
SILENCED = 7
"""The node whose job is stopped (SIGSTOP) while the others print: the one the overview must mark."""


@pytest.fixture
def hosts32(tmp_path):
    from tests.support.sshd import start_hosts, stop_hosts

    try:
        client, started = start_hosts(tmp_path, HOSTS, netns=True, shared_key=True)
    except RuntimeError as err:
        pytest.skip(str(err))
    yield client, started
    stop_hosts(started)


class EventReader:
    """``fsdp-tui run --json``'s events, read on a thread so the test can poll them."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.events, self.lock = proc, [], threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self.lock:
                    self.events.append(json.loads(line))

    def seen(self) -> list[dict]:
        with self.lock:
            return list(self.events)

    def until(self, what: str, check, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        while not check(evs := self.seen()):
            assert self.proc.poll() is None or check(self.seen()), f"the run ended before {what}: {_tail(evs)}"
            assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}: {_tail(evs)}"
            time.sleep(0.2)
        return evs


def _tail(evs: list[dict]) -> list[dict]:
    return [e for e in evs if e["type"] != "NodeLines"][-12:]


def _ranks(evs: list[dict], kind: str, **match) -> set[int]:
    return {e["node_rank"] for e in evs if e["type"] == kind and all(e.get(k) == v for k, v in match.items())}


def _pids_of_node(run_id: str, rank: int) -> list[int]:
    out = []
    for pid in tagged(run_id):
        try:
            if f"NODE_RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                out.append(pid)
        except OSError:
            continue
    return out


def _show_nodes(home: Path, client: Path, run_id: str) -> subprocess.CompletedProcess:
    return subprocess.run([FSDP_TUI, "show", run_id, "--nodes", "--json"], capture_output=True, text=True,
                          timeout=120, env=cli_env(home, HOME=str(client)), cwd=ROOT)


def test_a_job_on_32_ssh_hosts_runs_is_adopted_cancelled_and_the_silent_node_is_the_one_marked(home, tmp_path,
                                                                                               hosts32):
    """Launch, adoption after the owner is killed and cancel are checked first; the overview's marks
    (``show --nodes``) last, from what was seen while one node was silenced."""
    client, started = hosts32
    names = ", ".join(h.alias for h in started)
    wl = write_workload(tmp_path, f"""experiment_name: scale32
compute: {{hosts: [{names}]}}
mlflow: {{enabled: false}}
command: |
  for i in $(seq 1 1200); do echo "node $NODE_RANK line $i"; sleep 0.25; done
""")
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(client)), cwd=ROOT)
    reader = EventReader(proc)
    run_id, stopped = None, []
    try:
        evs = reader.until("a run id", lambda evs: bool(evs), 60)
        run_id = evs[0]["run_id"]
        everyone = set(range(HOSTS))
        evs = reader.until("every node running and printing",
                           lambda evs: _ranks(evs, "NodeStateChanged", state="running") == everyone
                           and _ranks(evs, "NodeLines") == everyone, 90)
        hosts_seen = {e["node_rank"]: e["host"] for e in evs if e["type"] == "NodeStateChanged"}
        assert hosts_seen == {i: f"node{i}" for i in range(HOSTS)}
        # Each node's job cost, sampled by its agent over SSH (every few seconds): its shell and its sleep.
        evs = reader.until("every node's usage", lambda evs: _ranks(evs, "NodeUsage") == everyone, 60)
        for e in (e for e in evs if e["type"] == "NodeUsage"):
            assert 1 <= e["processes"] <= 4 and 0 < e["rss_mib"] < 200 and e["cpu_pct"] >= 0, e

        # One node silenced: the overview must point at it, and at no other.
        stopped = _pids_of_node(run_id, SILENCED)
        assert stopped, f"no process of node {SILENCED} found"
        for pid in stopped:
            subprocess.run(["kill", "-STOP", str(pid)])
        overview, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline:
            shown = _show_nodes(home, client, run_id)
            if shown.returncode != 0:
                overview = shown
                break
            overview = json.loads(shown.stdout)
            if any(n["odd"] for n in overview["nodes"]):
                break
            time.sleep(2)
        for pid in stopped:
            subprocess.run(["kill", "-CONT", str(pid)])
        stopped = []

        # The run's owner killed: the follower starts another, which adopts the run and follows all 32 again.
        owner = owner_pid(run_id)
        assert owner is not None, "no owner process found"
        os.kill(owner, signal.SIGKILL)
        before = len(reader.seen())
        reader.until("every node's new lines under a new owner",
                     lambda evs: _ranks(evs[before:], "NodeLines") == everyone, 120)
        assert owner_pid(run_id) not in (None, owner)

        start = time.monotonic()
        out = subprocess.run([FSDP_TUI, "cancel", run_id], capture_output=True, text=True, timeout=120,
                             env=cli_env(home, HOME=str(client)), cwd=ROOT)
        assert out.returncode == 0, out.stdout + out.stderr
        assert proc.wait(timeout=60) == 130
        reader.thread.join(timeout=30)
        cancel_s = time.monotonic() - start
        assert tagged(run_id) == [], "processes of the run are left on the hosts"
        evs = reader.seen()
        assert evs[-1]["type"] == "RunFinished" and evs[-1]["state"] == "cancelled", _tail(evs)
        assert _ranks(evs, "NodeStateChanged", state="stopped") == everyone, _tail(evs)
        print(f"32 hosts: cancel to nothing left {cancel_s:.1f} s")
    finally:
        for pid in stopped:
            subprocess.run(["kill", "-CONT", str(pid)])
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()

    # The overview (``fsdp-tui show RUN --nodes --json``) as it was while node 7 was silent.
    assert isinstance(overview, dict), f"show --nodes --json failed: {overview.stdout[-500:]}{overview.stderr[-1500:]}"
    assert overview["run"] == run_id
    assert [n["node"] for n in overview["nodes"]] == list(range(HOSTS))
    assert [n["host"] for n in overview["nodes"]] == [f"node{i}" for i in range(HOSTS)]
    marked = {n["node"]: n["odd"] for n in overview["nodes"] if n["odd"]}
    assert set(marked) == {SILENCED}, marked
