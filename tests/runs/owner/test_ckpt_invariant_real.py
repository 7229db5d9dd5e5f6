"""Whose a checkpoint is, on real parts: two SSH hosts (a network namespace each) whose homes are private
disks, a fixed ``output_dir`` (``~/ckpt/two``: one folder per host, gathered into node 0's), the real CLI.
A shorter sequence than the model-based test's (``tests/runs/test_ckpt_invariant.py``), checked the same
way after each step: run A; B resumes A from its first checkpoint with ``keep_last: 1``; C resumes B onto
the hosts swapped; the workload launched again finds B's last step and is refused (nothing left to train).
A's and B's checkpoints stay theirs throughout, listed under their runs, and each shard's digest, written
by the trainer, is checked: a shard overwritten afterwards makes its checkpoint not whole, said so."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.cli import events, write_workload
from tests.support.ssh_runs import gloo_iface, ssh_cli

pytestmark = pytest.mark.slow


@pytest.fixture
def private_hosts(tmp_path):
    from tests.support.sshd import start_hosts, stop_hosts

    try:
        client, started = start_hosts(tmp_path, 2, netns=True, private_disks=True)
    except RuntimeError as err:
        pytest.skip(str(err))
    yield client, started
    stop_hosts(started)


def _workload(tmp_path: Path, started) -> Path:
    return write_workload(tmp_path, f"""experiment_name: two
compute: {{accelerator_type: CPU, procs_per_node: 1, num_accelerators: 2, hosts: [node0, node1]}}
environment: {{python: {sys.executable}}}
mlflow: {{enabled: false}}
env_variables: {{OMP_NUM_THREADS: 1, FSDP_TUI_ASSETS: /tmp/fsdp-tui-test-assets,
                GLOO_SOCKET_IFNAME: {gloo_iface(started)}}}
parameters:
  model_name: builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca
  output_dir: ~/ckpt/two
  max_seq_len: 64
  per_device_batch_size: 4
  max_steps: 4
  model: {{from_scratch: true}}
  logging: {{eval_max_batches: 1}}
  checkpoint: {{every_steps: 2, export_hf: false}}
""")


def _on_disk(disk: Path) -> dict[str, tuple[str | None, bool]]:
    """Every checkpoint in a host's ``~/ckpt/two``: name -> (its writer, whole)."""
    from trainer.wire.ckpt_layout import list_checkpoints

    return {c.name: (c.run_id, c.complete) for c in list_checkpoints(str(disk / "ckpt" / "two" / "checkpoints"))}


def _launched(out) -> str:
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return events(out.stdout)[0]["run_id"]


def _whole_of(disks, run_id: str) -> dict[int, list[str]]:
    return {i: sorted(n for n, (w, whole) in _on_disk(d).items() if w == run_id and whole) for i, d in enumerate(disks)}


def test_runs_resumes_and_a_swap_of_hosts_touch_only_their_own_checkpoints(home, tmp_path, private_hosts):
    client, started = private_hosts
    disks = [h.disk for h in started]
    wl = _workload(tmp_path, started)

    a = _launched(ssh_cli(home, client, "run", wl, "--json", timeout=600))
    assert _whole_of(disks, a) == {0: ["step-00000002", "step-00000004"], 1: []}
    meta = json.loads((disks[0] / "ckpt/two/checkpoints/step-00000004/meta.json").read_text())
    assert all(len(s["sha256"]) == 64 for s in meta["shards"].values()) and len(meta["metadata_sha256"]) == 64

    # B resumes A from its first checkpoint and keeps one of its own: A's two stay, whole and A's.
    b = _launched(ssh_cli(home, client, "resume", a, "--from", "2", "--set", "parameters.max_steps=6",
                          "--set", "parameters.checkpoint.keep_last=1", "--json", timeout=600))
    assert _whole_of(disks, a) == {0: ["step-00000002", "step-00000004"], 1: []}
    assert _whole_of(disks, b) == {0: ["step-00000006"], 1: []}
    shown = json.loads(ssh_cli(home, client, "show", b, "--json").stdout)
    assert shown["resume_check"]["verdict"] == "verified" and "shard digests" in shown["resume_check"]["checked"]
    listed_a = ssh_cli(home, client, "ckpt", a).stdout
    assert "step-00000002" in listed_a and "step-00000004" in listed_a and "step-00000006" not in listed_a
    listed_b = json.loads(ssh_cli(home, client, "ckpt", b, "--json").stdout)
    assert [(c["step"], c["whose"]) for c in listed_b] == [(2, "continued"), (4, "continued"), (6, "own")]

    # C resumes B on the hosts swapped: B's step 6 is copied to node1's folder for C, and stays B's on node0.
    c = _launched(ssh_cli(home, client, "resume", b, "--set", "compute.hosts=[node1,node0]",
                          "--set", "parameters.max_steps=8", "--json", timeout=600))
    assert _whole_of(disks, b) == {0: ["step-00000006"], 1: []}  # the original, where it was
    assert _whole_of(disks, a) == {0: ["step-00000002", "step-00000004"], 1: []}
    assert _whole_of(disks, c)[1] == ["step-00000008"]
    assert "step-00000006" not in _on_disk(disks[1])  # the copy C brought for itself went when C ended
    assert [x["step"] for x in json.loads(ssh_cli(home, client, "ckpt", b, "--json").stdout)] == [2, 4, 6]

    # The workload again: resume: auto would continue B's step 6 of a 4-step run: refused, nothing started.
    again = ssh_cli(home, client, "run", wl, "--json", timeout=300)
    assert again.returncode == 2 and "nothing left to train" in again.stderr and f"run {b}" in again.stderr, \
        again.stderr[-2000:]

    # A shard of A's step 4 overwritten, its size kept: the export refuses it, and it is not whole after.
    shard = disks[0] / "ckpt/two/checkpoints/step-00000004/__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[64:68] = b"\xff\xff\xff\xff"
    shard.write_bytes(bytes(data))
    exported = ssh_cli(home, client, "export", a, "--step", "4", timeout=300)
    assert exported.returncode == 1 and "__1_0.distcp (written on node 1)" in exported.stderr, exported.stderr
    listed = json.loads(ssh_cli(home, client, "ckpt", a, "--json").stdout)
    assert [(x["step"], x["complete"]) for x in listed] == [(2, True), (4, False)]
    assert "differ from what the trainer wrote" in listed[1]["why"]
