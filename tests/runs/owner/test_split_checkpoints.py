"""Checkpoints on hosts that share no disk: two SSH hosts (a network namespace each) whose homes are
folders of their own, bind-mounted in each host's own mount namespace, so what one writes the other
never sees. A real 2-node run with the editor template's relative ``output_dir``, then every tool."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli_env, events, wait_until, write_workload
from tests.support.processes import namespace_pids, send
from tests.support.ssh_runs import gloo_iface, ssh_cli

pytestmark = pytest.mark.slow


@pytest.fixture
def private_hosts(tmp_path):
    """Two sshd hosts, each in its network namespace with a private disk under its home."""
    from tests.support.sshd import start_hosts, stop_hosts

    try:
        client, started = start_hosts(tmp_path, 2, netns=True, private_disks=True)
    except RuntimeError as err:
        pytest.skip(str(err))
    yield client, started
    stop_hosts(started)


def _workload(tmp_path: Path, started, name: str = "split", extra: str = "") -> Path:
    return write_workload(tmp_path, f"""experiment_name: {name}
compute: {{accelerator_type: CPU, procs_per_node: 1, num_accelerators: 2, hosts: [node0, node1]}}
environment: {{python: {sys.executable}}}
ssh: {{lost_after_s: 8}}
mlflow: {{enabled: false}}
env_variables: {{OMP_NUM_THREADS: 1, FSDP_TUI_ASSETS: /tmp/fsdp-tui-test-assets,
                GLOO_SOCKET_IFNAME: {gloo_iface(started)}}}
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: outputs
  max_seq_len: 64
  per_device_batch_size: 4
  learning_rate: 0.003
  max_steps: 6
  model: {{from_scratch: true}}
  logging: {{eval_max_batches: 1}}
  checkpoint: {{every_steps: 2, export_hf: false}}
{extra}""")


def _slow_egress(host, rate: str = "2mbit") -> None:
    """Everything ``host`` sends at ``rate`` (its shard in a gather takes about 7 s, long enough to be seen
    on node 0's disk after its job has ended; its share of the tiny model's collectives, about a megabyte
    a step, about 4 s a step), with small socket buffers: what a process has sent is mostly still in the
    process when the host dies, not in the kernel, which would deliver it after the process is gone."""
    ns = ["ip", "netns", "exec", host.netns]
    subprocess.run([*ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "32kb",
                    "latency", "400ms"], check=True, capture_output=True)
    subprocess.run([*ns, "sysctl", "-w", "net.ipv4.tcp_wmem=4096 16384 65536"], check=True, capture_output=True)


def _kill_host(host) -> None:
    """Every process of the host (its sshd, the agents, anything its jobs left), as a machine that dies."""
    send(namespace_pids(host.netns))
    host.proc.wait()


def _losses(home: Path, run_id: str) -> dict[int, float]:
    records = [json.loads(x) for x in (home / "runs" / run_id / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r.get("kind", "train") == "train"}


def _steps_on(disk: Path, run_id: str, rank: int) -> dict[str, list[str]]:
    """The checkpoint folders in node ``rank``'s run directory on a host's own disk, with their files."""
    root = disk / ".fsdp-tui" / "runs" / run_id / f"node-{rank}" / "outputs" / "checkpoints"
    return {d.name: sorted(f.name for f in d.iterdir()) for d in sorted(root.glob("step-*"))} if root.is_dir() else {}


def _wait_final(home: Path, run_id: str, timeout: float = 300):
    from launcher.runs.core.store import RunStore

    store = RunStore(home)
    deadline = time.monotonic() + timeout
    while not store.get_run(run_id).summary.state.is_final and time.monotonic() < deadline:
        time.sleep(0.5)
    return store.get_run(run_id)


def test_a_two_node_run_on_private_disks_is_gathered_listed_exported_and_resumed(home, tmp_path, private_hosts,
                                                                                monkeypatch):
    """Node 1's shards reach node 0 only through the launcher's gathers, straight from node 1 (what it sends
    slowed, so a gather takes seconds); node 1 dies during the last one: that step stays not whole, named,
    and the ones before are whole, listed, exported and resumed, on both nodes and on the other host alone."""
    client, started = private_hosts
    disk0, disk1 = (h.disk for h in started)
    wl = _workload(tmp_path, started)

    # Where checkpoints land is asked of the nodes, before anything runs.
    doctor = json.loads(ssh_cli(home, client, "doctor", wl, "--json").stdout)
    place = next(c for c in doctor["nodes"][0]["checks"] if c["name"] == "checkpoints")
    assert place["status"] == "ok" and "one folder per node" in place["detail"], place
    assert "gathered into node 0's folder" in place["detail"]
    dry = ssh_cli(home, client, "run", wl, "--dry-run").stdout
    assert "  checkpoints: one folder per node" in dry, dry

    _slow_egress(started[1])
    proc = subprocess.Popen([FSDP_TUI, "run", str(wl), "--json"], stdout=subprocess.PIPE, text=True,
                            env=cli_env(home, HOME=str(client)), cwd=ROOT)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
    reader.start()
    run_id = wait_until(lambda: events("".join(seen[:1])) and events(seen[0])[0]["run_id"], 60, "the run's id")
    last = disk0 / ".fsdp-tui/runs" / run_id / "node-0/outputs/checkpoints/step-00000006"
    # The last save's gather under way (node 1's shard arriving on node 0): node 1 dies. Its job may be
    # between that save and its end (its share of the last barrier waits behind the shard): then the run
    # fails too, naming node 1; either way the save it was copying is not whole.
    wait_until(lambda: (last / ".part-__1_0.distcp").exists(), 300, "node 1's shard of step 6 arriving on node 0")
    _kill_host(started[1])
    code = proc.wait(timeout=180)
    reader.join(timeout=30)
    state = json.loads(ssh_cli(home, client, "show", run_id, "--json").stdout)
    assert (code, state["state"]) in ((0, "succeeded"), (1, "failed")), "".join(seen)[-3000:]
    if code:
        assert state["triage"]["node_rank"] == 1, state["triage"]
    plan = json.loads((home / "runs" / run_id / "plan.json").read_text())
    assert plan["ckpt_place"]["kind"] == "per_node" and plan["ckpt_place"]["shares"] == [True, False]
    lines = [json.loads(x) for x in (home / "runs" / run_id / "gathers.jsonl").read_text().splitlines()]
    gathers = [g for g in lines if "name" in g]
    assert len(lines) == len(gathers), lines  # no note: the nodes dialled each other throughout
    assert [(g["name"], g["ok"]) for g in gathers] == [("step-00000002", True), ("step-00000004", True),
                                                      ("step-00000006", False)], gathers
    assert gathers[0]["from_nodes"] == [1] and gathers[0]["files"] == 1 and gathers[0]["via"] == "direct"
    assert "node 1" in gathers[2]["error"] and "lost" in gathers[2]["error"], gathers[2]
    started[1].restart()  # the machine is back, with its disk and its network as fast as before
    subprocess.run(["ip", "netns", "exec", started[1].netns, "tc", "qdisc", "del", "dev", "eth0", "root"], check=True)
    subprocess.run(["ip", "netns", "exec", started[1].netns, "sysctl", "-w",
                    f"net.ipv4.tcp_wmem={Path('/proc/sys/net/ipv4/tcp_wmem').read_text().strip()}"],
                   check=True, capture_output=True)  # this machine's own buffers again

    # Node 1's shards of the gathered steps are in node 0's folders (verified), and gone from node 1.
    on0 = _steps_on(disk0, run_id, 0)
    assert list(on0) == ["step-00000002", "step-00000004", "step-00000006"], on0
    assert on0["step-00000004"] == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.json"]
    assert on0["step-00000006"] == [".metadata", "__0_0.distcp", "meta.json"]  # no half copy under its name
    assert list(_steps_on(disk1, run_id, 1)) == ["step-00000006"]
    meta = json.loads((disk0 / ".fsdp-tui/runs" / run_id / "node-0/outputs/checkpoints/step-00000004/meta.json")
                      .read_text())
    assert {f: s["node"] for f, s in meta["shards"].items()} == {"__0_0.distcp": 0, "__1_0.distcp": 1}
    shown = ssh_cli(home, client, "show", run_id).stdout
    assert "gathered  2 checkpoints gathered into node 0" in shown and "safe      step 4" in shown, shown
    assert "step-00000006 NOT whole" in shown

    listed = ssh_cli(home, client, "ckpt", run_id).stdout
    assert "NO (node 1)" in listed, listed
    ckpt = json.loads(ssh_cli(home, client, "ckpt", run_id, "--json").stdout)
    assert [(c["step"], c["complete"]) for c in ckpt] == [(2, True), (4, True), (6, False)]

    here = tmp_path / "exported"
    exported = ssh_cli(home, client, "export", run_id, "--to", here)  # the newest whole one: step 4
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert "export-step-00000004" in exported.stdout and list(here.glob("*.safetensors"))

    # Resume from the app's checkpoints screen on the same two nodes: node 1 has no copy, node 0 sends it.
    from tests.support.tui import wait_for
    from tui.app import FsdpTuiApp
    from tui.screens.checkpoints import CheckpointsScreen

    monkeypatch.setenv("HOME", str(client))
    monkeypatch.setenv("FSDP_TUI_HOME", str(home))

    async def resume_from_screen() -> str:
        app = FsdpTuiApp(home)
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause()
            app.push_screen(CheckpointsScreen(run_id))
            await pilot.pause()
            table = app.screen.query_one("DataTable")
            await wait_for(pilot, lambda: table.row_count == 3, timeout=60)
            table.move_cursor(row=0)
            await pilot.press("r")
            await wait_for(pilot, lambda: len(app.launched) == 1, timeout=60)
            # The new run's monitor mounted before the app goes (a screen torn down half-mounted raises).
            await wait_for(pilot, lambda: type(app.screen).__name__ == "RunMonitorScreen", timeout=60)
            await pilot.pause(0.5)
            return app.launched[0]

    resumed = asyncio.run(resume_from_screen())
    record = _wait_final(home, resumed)
    assert record.summary.state.value == "succeeded", record.transitions[-3:]
    log0 = (home / "runs" / resumed / "nodes" / "0.log").read_text()
    assert "MiB) to node 1 for the resume" in log0 and "at step 2" in log0, log0[-2000:]
    straight, again = _losses(home, run_id), _losses(home, resumed)
    assert sorted(again) == [3, 4, 5, 6]
    assert again == pytest.approx({s: straight[s] for s in again}, rel=1e-5)  # float32 rounding at most
    # The resume proves itself on the two nodes: the run it claims to continue wrote the checkpoint, and the
    # data position, next batch, seed and learning rate are the stopped run's.
    check = json.loads(ssh_cli(home, client, "show", resumed, "--json").stdout)["resume_check"]
    assert (check["verdict"], check["from_run"], check["from_step"]) == ("verified", run_id, 2), check
    assert {"checkpoint's run", "next batch", "data position", "seed", "learning rate"} <= set(check["checked"])

    # Resume on one node, the other host, one rank instead of two: step 4 is brought there first.
    one = ssh_cli(home, client, "resume", run_id, "--set", "compute.hosts=[node1]",
                  "--set", "compute.num_accelerators=1", "--json")
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-2000:]
    single = events(one.stdout)[0]["run_id"]
    assert "copied there from run" in one.stderr, one.stderr
    log = (home / "runs" / single / "nodes" / "0.log").read_text()
    assert "resumed from outputs/checkpoints/step-00000004 at step 4" in log, log[-2000:]
    assert sorted(_losses(home, single)) == [5, 6]
    check = json.loads(ssh_cli(home, client, "show", single, "--json").stdout)["resume_check"]
    assert (check["verdict"], check["world_before"], check["world_after"]) == ("resharded", 2, 1), check
    line = next(x for x in ssh_cli(home, client, "show", single).stdout.splitlines() if x.startswith("  resume "))
    assert "resharded" in line and "2 ranks" in line and "-> 1 rank" in line, line
    # The copy the resume brought for itself was its own: gone when it ended; the original stays the old run's.
    brought = disk1 / ".fsdp-tui/runs" / single / "node-0/outputs/checkpoints/step-00000004"
    assert not brought.exists() and sorted(_steps_on(disk1, single, 0)) == ["step-00000006"]
    assert _steps_on(disk0, run_id, 0)["step-00000004"] == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.json"]
