"""A run's files on its SSH nodes, over real sshd hosts (a network namespace each, or loopback addresses):
a launch refused before anything is recorded for an unknown host key; then a 2-node torchrun job whose
every rank's own output is read back from the node that ran it (``logs --rank``); a shell (here: a
command, one word a command line, several words quoted once) on node 1 in its run directory through the
user's own ``ssh``; and ``clean`` removing the run's
folders on both nodes, after which ``ssh`` says the folder is gone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import FSDP_TUI, ROOT, cli_env, write_workload

pytestmark = pytest.mark.slow

RANKS = """import os, sys
rank = os.environ["RANK"]
print(f"hello from rank {rank} on node {os.environ['GROUP_RANK']}", flush=True)
print(f"rank {rank} says goodbye", file=sys.stderr, flush=True)
"""


def ssh_cli(home: Path, client: Path, *args: str, timeout: int = 300):
    return subprocess.run([FSDP_TUI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(home, HOME=str(client)), cwd=ROOT)


def test_a_runs_nodes_from_here_ranks_a_shell_and_clean(home, tmp_path, ns_hosts):
    client, started = ns_hosts
    code = tmp_path / "code"
    code.mkdir()
    (code / "ranks.py").write_text(RANKS)
    wl = write_workload(tmp_path, f"""experiment_name: node-files
compute: {{accelerator_type: CPU, procs_per_node: 2, hosts: [node0, node1]}}
environment: {{python: {sys.executable}}}
mlflow: {{enabled: false}}
code_source: {{type: snapshot, snapshot: {{root_path: {code}}}}}
command: |
  cd "$CODE_SOURCE_PATH"
  python -m torch.distributed.run --nnodes="$NUM_NODES" --node_rank="$NODE_RANK" \\
    --nproc_per_node="$LOCAL_WORLD_SIZE" --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" ranks.py
""")
    known = client / ".ssh" / "known_hosts"
    trusted = known.read_text()
    known.write_text(trusted.splitlines()[0] + "\n")  # node1's key unknown
    refused = ssh_cli(home, client, "run", wl, "--json")
    assert refused.returncode == 2 and [json.loads(x)["type"] for x in refused.stdout.splitlines()] == [
        "LaunchRefused"], refused.stdout
    assert "cannot run: node 1 (node1): unknown host key" in refused.stderr and "fsdp-tui trust node1" in refused.stderr
    assert json.loads(ssh_cli(home, client, "runs", "--json").stdout) == []  # nothing recorded, nothing left
    known.write_text(trusted)

    out = ssh_cli(home, client, "run", wl, "--json")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    run_id = json.loads(out.stdout.splitlines()[0])["run_id"]
    node1_log = (home / "runs" / run_id / "nodes" / "1.log").read_text()
    assert "hello from rank 3 on node 1" in node1_log and "\x1b_" not in node1_log  # as the job wrote it
    for rank in (1, 2):  # one of each node's
        alone = ssh_cli(home, client, "logs", run_id, "--rank", str(rank))
        assert alone.returncode == 0, alone.stderr
        # torchrun tees a rank's stdout and stderr each on its own: their order between them is not kept
        own = alone.stdout.splitlines()
        assert {f"hello from rank {rank} on node {rank // 2}", f"rank {rank} says goodbye"} <= set(own), own
        assert not [line for line in own if "hello from" in line and f"rank {rank} " not in line]  # no other rank's

    remote = started[0].home / ".fsdp-tui" / "runs" / run_id
    shell = ssh_cli(home, client, "ssh", run_id, "1", "--", "pwd")
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.strip() == str(remote / "node-1")
    line = ssh_cli(home, client, "ssh", run_id, "1", "--", "pwd; ls")  # one word: a command line, as ssh runs it
    assert line.returncode == 0, line.stderr
    assert line.stdout.splitlines()[0] == str(remote / "node-1") and "node.log" in line.stdout.splitlines()[1:]
    words = ssh_cli(home, client, "ssh", run_id, "1", "--", "printf", "%s|", "a b", "$HOME;")  # quoted once
    assert words.returncode == 0 and words.stdout == "a b|$HOME;|", words.stdout + words.stderr
    assert sorted(p.name for p in remote.iterdir()) == ["node-0", "node-1"]

    cleaned = ssh_cli(home, client, "clean", run_id)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"node 0 (node0): removed {remote / 'node-0'}" in cleaned.stdout.replace("~", str(started[0].home))
    assert not remote.exists()  # both node folders and the run's folder above them
    gone = ssh_cli(home, client, "ssh", run_id, "1", "--", "pwd")
    assert gone.returncode == 1 and "is not there (removed?)" in gone.stderr
    assert ssh_cli(home, client, "show", run_id).returncode == 0  # the record stays
