"""SLURM runs through a real 2-node cluster built on this machine (tests/support/slurm_cluster.py):
munged, slurmctld, two slurmd in network namespaces, a login node over SSH. fsdp-tui reaches the
cluster only through the login node, as a user's laptop would."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli_env, events, tagged, wait_until
from tests.support.hung_rank import HUNG_RANK as HANG  # rank 1 hangs at step 6
from tests.support.slurm_runs import first_event, node_file, slurm_cli, slurm_popen, wait_said, workload

pytestmark = pytest.mark.slow


TRAINER = """parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: out
  max_seq_len: 64
  per_device_batch_size: 4
  learning_rate: 0.003
  max_steps: {steps}
  model: {{from_scratch: true}}
  logging: {{eval_max_batches: 1{eval}}}
  checkpoint: {{every_steps: {every}, export_hf: false}}
"""


def wait_state(home: Path, run_id: str, states: set[str], timeout: float = 120) -> dict:
    from launcher.runs.core.store import RunStore

    store = RunStore(home)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = store.get_run(run_id)
        if record is not None and record.summary.state.value in states:
            return {"state": record.summary.state.value, "transitions": record.transitions}
        time.sleep(0.2)
    raise AssertionError(f"{run_id} never reached {states}: {store.get_run(run_id).transitions[-5:]}")


def test_air_style_script_on_two_slurm_nodes_every_line_mirrored_once(home, tmp_path, slurm):
    wl = workload(tmp_path, slurm, f"""code_source: {{type: snapshot, snapshot: {{root_path: {ROOT / 'sample_workloads/byo_script'}}}}}
command: |
  cd "$CODE_SOURCE_PATH"
  echo "node $NODE_RANK on $(hostname) of $NUM_NODES, rendezvous $MASTER_ADDR:$MASTER_PORT"
  python -m torch.distributed.run --nnodes="$NUM_NODES" --node_rank="$NODE_RANK" \\
    --nproc_per_node="$LOCAL_WORLD_SIZE" --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" train.py
parameters: {{max_steps: 8}}
""")
    out = slurm_cli(home, slurm, "run", wl, "--json")
    evs = events(out.stdout)
    run_id = evs[0]["run_id"]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert [e["record"]["step"] for e in evs if e["type"] == "MetricsRecorded"] == list(range(1, 9))
    for rank, host in enumerate(slurm.node_names):
        mirror = (home / "runs" / run_id / "nodes" / f"{rank}.log").read_bytes()
        assert mirror == node_file(slurm, run_id, rank, "node.log").read_bytes()  # every line, once
        assert f"node {rank} on {host} of 2, rendezvous {slurm.node_names[0]}:" in mirror.decode()
    assert "World size=2" in (home / "runs" / run_id / "nodes" / "0.log").read_text()
    assert tagged(run_id) == []


def test_builtin_trainer_checkpoints_are_listed_and_resume_continues(home, tmp_path, slurm):
    wl = workload(tmp_path, slurm, TRAINER.format(steps=6, every=3, eval=""))
    out = slurm_cli(home, slurm, "run", wl, "--json")
    evs = events(out.stdout)
    run_id = evs[0]["run_id"]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    train = [e["record"]["step"] for e in evs if e["type"] == "MetricsRecorded" and e["record"]["kind"] == "train"]
    assert train == list(range(1, 7))
    ckpt = json.loads(slurm_cli(home, slurm, "ckpt", run_id, "--json").stdout)
    assert [(c["step"], c["complete"]) for c in ckpt] == [(3, True), (6, True)]
    assert ckpt[0]["path"] == str(node_file(slurm, run_id, 0, "out") / "checkpoints" / "step-00000003")

    resumed = slurm_cli(home, slurm, "resume", run_id, "--from", "3", "--json")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    revs = events(resumed.stdout)
    steps = [e["record"]["step"] for e in revs if e["type"] == "MetricsRecorded" and e["record"]["kind"] == "train"]
    assert steps == [4, 5, 6]
    assert "resumed from" in (home / "runs" / revs[0]["run_id"] / "nodes" / "0.log").read_text()


def test_cancel_while_pending_and_while_running_leaves_no_process(home, tmp_path, slurm):
    slurm.wait_idle()
    blocker = slurm.run(["sbatch", "--parsable", "--nodes=2", "--exclusive", f"--chdir={slurm.job_dir}",
                         "--wrap=sleep 300"]).stdout.strip()  # both nodes taken: ours has to wait
    wl = workload(tmp_path, slurm, "command: |\n  echo tick $NODE_RANK; sleep 300 & wait\n")
    proc = slurm_popen(home, slurm, "run", wl, "--json")
    run_id = first_event(proc)
    said = wait_said(home, run_id, "queued (pending: Resources)", timeout=60)
    assert said[-1][1] == "pending", said
    time.sleep(2)
    assert slurm_cli(home, slurm, "runs", "--json").stdout.count('"pending"') >= 1
    assert slurm_cli(home, slurm, "cancel", run_id).returncode == 0
    assert proc.wait(timeout=60) == 130
    assert wait_state(home, run_id, {"cancelled"})["state"] == "cancelled"
    assert not [j for j, s in slurm.jobs().items() if j != blocker and s in ("PENDING", "RUNNING")]
    slurm.run(["scancel", blocker])
    slurm.wait_idle()

    proc = slurm_popen(home, slurm, "run", wl, "--json")
    run_id = first_event(proc)
    deadline = time.monotonic() + 90
    while len(tagged(run_id)) < 4 and time.monotonic() < deadline:  # each node: task, bash, sleep
        time.sleep(0.2)
    assert len(tagged(run_id)) >= 4
    assert slurm_cli(home, slurm, "cancel", run_id).returncode == 0
    assert tagged(run_id) == []
    assert proc.wait(timeout=60) == 130
    assert wait_state(home, run_id, {"cancelled"})["state"] == "cancelled"


def test_a_job_failing_on_node_1_is_triaged_naming_node_1(home, tmp_path, slurm):
    wl = workload(tmp_path, slurm, """command: |
  if [ "$NODE_RANK" = 1 ]; then echo "RuntimeError: CUDA error: an illegal memory access"; exit 3; fi
  sleep 120
""")
    out = slurm_cli(home, slurm, "run", wl, "--json")
    evs = events(out.stdout)
    run_id = evs[0]["run_id"]
    assert out.returncode != 0
    finished = evs[-1]
    assert finished["type"] == "RunFinished" and finished["state"] == "failed", finished
    triage = json.loads((home / "runs" / run_id / "triage.json").read_text())
    assert triage["node_rank"] == 1, triage
    assert tagged(run_id) == []


def test_a_time_limit_checkpoints_on_the_signal_and_the_next_job_resumes(home, tmp_path, slurm):
    """SLURM signals ahead of --time (its time-limit check runs every 30 s); the trainer saves and stops,
    fsdp-tui submits the next job, which resumes from that checkpoint. (What happens when resubmissions
    run out is the policy's, tested against the fake backend.)"""
    wl = workload(tmp_path, slurm, TRAINER.format(steps=1_000_000, every=1_000_000, eval=""),
                  slurm=", time: 1, signal_lead_s: 55, max_resubmits: 3")
    proc = slurm_popen(home, slurm, "run", wl, "--json")
    run_id = first_event(proc)
    try:
        said = wait_said(home, run_id, "resubmitted, it resumes from there", timeout=150)
        resubmitted = next(t for t in said if "resubmitted" in t[3])
        assert resubmitted[1] == "retrying" and resubmitted[2] == 2, said[-3:]
        mirror = home / "runs" / run_id / "nodes" / "0.log"
        deadline = time.monotonic() + 120
        while "resumed from" not in mirror.read_text().partition("=== fsdp-tui: attempt 2")[2]:
            assert time.monotonic() < deadline, mirror.read_text()[-3000:]
            time.sleep(0.2)
        assert slurm_cli(home, slurm, "cancel", run_id).returncode == 0
        proc.communicate(timeout=60)  # reads what it printed: a full pipe would hold it up
        assert proc.returncode == 130
    finally:
        proc.kill()
    first, second = mirror.read_text().split("=== fsdp-tui: attempt 2")
    saved = [int(line.split("checkpoint at step ")[1].split()[0]) for line in first.splitlines()
             if "checkpoint at step " in line and "SIGUSR1" in line]
    assert len(saved) == 1, first[-3000:]
    assert f"at step {saved[0]}" in second.split("resumed from")[1].splitlines()[0]
    # One SLURM job per attempt. The second job has the same one-minute limit, so on a slow machine its own
    # signal can come before the cancel does, and a third attempt is submitted: each its own job still.
    jobs = json.loads(node_file(slurm, run_id, 0, "jobs.json").read_text())
    assert sorted(jobs)[:2] == ["1", "2"] and len(set(jobs.values())) == len(jobs), jobs
    assert tagged(run_id) == []


def test_a_hung_slurm_job_is_flagged_its_stacks_taken_and_a_dead_owner_replaced(home, tmp_path, slurm):
    """Stall detection, stack dumps (py-spy on the compute node, asked through the shared directory) and
    adoption after the owner process dies work for a SLURM run as for an SSH run."""
    import os
    import signal

    from launcher.runs.core.store import RunStore

    code = tmp_path / "code"
    code.mkdir()
    (code / "hang.py").write_text(HANG)
    wl = workload(tmp_path, slurm, f"""code_source: {{type: snapshot, snapshot: {{root_path: {code}}}}}
command: |
  python -m torch.distributed.run --nnodes="$NUM_NODES" --node_rank="$NODE_RANK" --nproc_per_node=1 \\
    --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" "$CODE_SOURCE_PATH/hang.py"
metrics: {{stall_factor: 5, stall_min_s: 3}}
""")
    proc = slurm_popen(home, slurm, "run", wl, "--json")
    run_id = first_event(proc)
    try:
        said = wait_said(home, run_id, "stalled at step 5: no step for", timeout=120)
        assert said[-1][1] == "running"
        dumps = slurm_cli(home, slurm, "stacks", run_id, timeout=120)
        assert dumps.returncode == 0, dumps.stdout + dumps.stderr
        assert "(py-spy)" in dumps.stdout and "hang_forever" in dumps.stdout and "all_reduce" in dumps.stdout

        store = RunStore(home)
        owner = store.get_run(run_id).launcher_pid
        os.kill(owner, signal.SIGKILL)  # the run's owner dies; the job does not
        proc.kill()
        time.sleep(1)
        assert len(tagged(run_id)) >= 2
        listed = slurm_cli(home, slurm, "runs", "--json")  # adopts it
        assert listed.returncode == 0, listed.stderr
        # The adopter reaches the job through the login node first (seconds alone, a minute on a busy machine).
        wait_until(lambda: store.get_run(run_id).launcher_pid not in (None, owner), 90, "a new owner of the run")
        assert slurm_cli(home, slurm, "cancel", run_id).returncode == 0
        assert wait_state(home, run_id, {"cancelled"})["state"] == "cancelled"
        assert tagged(run_id) == []
        mirror = (home / "runs" / run_id / "nodes" / "0.log").read_bytes()
        assert mirror == node_file(slurm, run_id, 0, "node.log").read_bytes()
        steps = [line for line in mirror.decode().splitlines() if line.startswith("step=")]
        assert steps == [f"step={s}/1000 loss={1.0 / s:.4f}" for s in range(1, 6)]
    finally:
        proc.kill()


def test_fsdp_tui_on_the_login_node_itself(home, tmp_path, slurm):
    """`login: local`: the scheduler's commands run here (SLURM_CONF from this environment), no SSH."""
    wl = workload(tmp_path, slurm, "command: echo hello from $NODE_RANK on $(hostname)\n")
    wl.write_text(wl.read_text().replace(f"login: {slurm.login_alias}", "login: local"))
    out = subprocess.run([FSDP_TUI, "run", str(wl), "--json"], capture_output=True, text=True, timeout=300,
                         env=cli_env(home, SLURM_CONF=str(slurm.conf)), cwd=ROOT)
    evs = events(out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    run_id = evs[0]["run_id"]
    for rank, host in enumerate(slurm.node_names):
        assert _job_lines(home / "runs" / run_id / "nodes" / f"{rank}.log") == f"hello from {rank} on {host}\n"


def test_an_scancel_from_elsewhere_is_a_cancelled_run(home, tmp_path, slurm):
    wl = workload(tmp_path, slurm, "command: |\n  echo tick $NODE_RANK; sleep 300 & wait\n")
    proc = slurm_popen(home, slurm, "run", wl, "--json")
    run_id = first_event(proc)
    try:
        deadline = time.monotonic() + 90
        while len(tagged(run_id)) < 4 and time.monotonic() < deadline:  # each node: bash, sleep
            time.sleep(0.2)
        jobs = node_file(slurm, run_id, 0, "jobs.json")
        slurm.run(["scancel", json.loads(jobs.read_text())["1"]])
        proc.communicate(timeout=90)
        assert proc.returncode == 130
    finally:
        proc.kill()
    assert wait_state(home, run_id, {"cancelled", "failed"})["state"] == "cancelled"
    assert tagged(run_id) == []


def _job_lines(mirror) -> str:
    """A node's log without the agent's own note of the network interface it chose."""
    return "".join(line for line in mirror.read_text().splitlines(keepends=True)
                   if not line.startswith("fsdp-tui agent: "))
