"""A dry run as ``run --dry-run`` says it, from the typed value alone: the plan's header, each node, and a SLURM
run's submission and batch script."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.present.dry_run import dry_run_text
from launcher.workload.ckpt_place import CheckpointPlace
from launcher.workload.dry_run import CodeShipped, DryRun, NodeDryRun, SlurmDryRun, SnapshotSize

NODE = NodeDryRun(rank=0, host="this machine", directory="'/data/r 1/node-0'",
                  environment=(("A", "'it'\"'\"'s'"), ("NODE_RANK", "0")), command=("python3 -m trainer x.yaml",))
LOCAL = DryRun(run_id="r1", experiment="demo", num_nodes=1, procs_per_node=2, kind="cpu", gpu_model=None,
               world_size=2, master_addr="127.0.0.1", master_port=29500, builtin_trainer=True, code=None,
               dependencies=(), blockers=(), checkpoints=None, secrets=(), nodes=(NODE,))
LOCAL_TEXT = """\
run r1: experiment 'demo'
  1 node x 2 processes (cpu), world size 2
  rendezvous 127.0.0.1:29500
  runs: the built-in trainer (torchrun -m trainer)

node 0: this machine
  directory: '/data/r 1/node-0'
  environment:
    A='it'"'"'s'
    NODE_RANK=0
  command:
    python3 -m trainer x.yaml
"""

HOSTS = replace(
    LOCAL, num_nodes=2, procs_per_node=1, kind="gpu", gpu_model="H100", master_addr="gpu-a", builtin_trainer=False,
    code=CodeShipped(root="/src", only=("train.py", "lib"), size=SnapshotSize(files=1, total_bytes=3 * 2**20, refused=2)),
    dependencies=("numpy", "torch>=2"), blockers=("compute.hosts is missing",),
    checkpoints=CheckpointPlace("bucket", "s3://b/x"), secrets=(("TOKEN", "s/k"),),
    nodes=tuple(NodeDryRun(rank=r, host=f"alice@gpu-{'ab'[r]}:2222", directory=f"~/runs/r1/node-{r}",
                           environment=(("NODE_RANK", str(r)),), iface_env=("GLOO_SOCKET_IFNAME",),
                           rank_tag_env="TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
                           command=("cd \"$CODE_SOURCE_PATH\"", "python train.py")) for r in (0, 1)))
HOSTS_TEXT = """\
run r1: experiment 'demo'
  2 nodes x 1 process (gpu H100), world size 2
  rendezvous gpu-a:29500
  runs: the workload's command
  code snapshot: /src (only train.py, lib) -> <node dir>/code (1 file, 3.0 MiB, 2 entries a node refuses)
  dependencies: numpy torch>=2
  cannot run yet: compute.hosts is missing
  checkpoints: a bucket (s3://b/x): every node writes and reads it directly
""" + "".join(f"""
node {r}: alice@gpu-{'ab'[r]}:2222
  directory: ~/runs/r1/node-{r}
  environment:
    NODE_RANK={r}
    GLOO_SOCKET_IFNAME=<the interface that reaches MASTER_ADDR, found on the node>
    TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=<each line's rank, as a tag no terminal shows>
    TOKEN=******  (secret s/k)
  command:
    cd "$CODE_SOURCE_PATH"
    python train.py
""" for r in (0, 1))

SLURM = replace(LOCAL, code=CodeShipped(root="/src", commit="abc123", git=True, remote="upstream"),
                slurm=SlurmDryRun(login=None, run_dir="/shared/r1", script_file="node-0/job-1.sbatch",
                                  agent_file="node-0/agent.zip", port_per_job=True,
                                  script="#!/bin/bash\n#SBATCH --nodes=1\nsrun x\n"))
SLURM_TEXT = LOCAL_TEXT.replace(
    "  runs: the built-in trainer (torchrun -m trainer)\n",
    "  runs: the built-in trainer (torchrun -m trainer)\n"
    "  code snapshot: /src as committed at commit abc123 on upstream (fetched at launch) -> <node dir>/code\n") + """
SLURM: submitted through this machine (the login node) with `sbatch --parsable node-0/job-1.sbatch` in /shared/r1
  shipped to every node-<rank>/ there: parameters.yaml, code/ (snapshot of /src), pkg/trainer/ (the built-in trainer); node-0/agent.zip (the node task)
  NODE_RANK comes from SLURM_NODEID, MASTER_ADDR is the first host of SLURM_JOB_NODELIST, MASTER_PORT is 20000 + job id mod 20000
  every node works in node-0/ (one folder on the shared filesystem: a relative output_dir is shared)
  secrets reach the job through sbatch's environment, never this script

batch script (node-0/job-1.sbatch):
  #!/bin/bash
  #SBATCH --nodes=1
  srun x
"""

SLURM_LOGIN = replace(LOCAL, builtin_trainer=False, code=CodeShipped(root="/src", branch="dev", git=True, remote=True),
                      slurm=replace(SLURM.slurm, login="alice@login", port_per_job=False))
SLURM_LOGIN_LINES = [
    "  code snapshot: /src as committed at branch dev on its remote (fetched at launch) -> <node dir>/code",
    "SLURM: submitted through alice@login with `sbatch --parsable node-0/job-1.sbatch` in /shared/r1",
    "  shipped to every node-<rank>/ there: parameters.yaml, code/ (snapshot of /src); node-0/agent.zip (the node task)",
    "  NODE_RANK comes from SLURM_NODEID, MASTER_ADDR is the first host of SLURM_JOB_NODELIST",
]


@pytest.mark.parametrize(("dry", "text"), [(LOCAL, LOCAL_TEXT), (HOSTS, HOSTS_TEXT), (SLURM, SLURM_TEXT)],
                         ids=["local", "hosts", "slurm"])
def test_a_dry_run_reads_as_the_cli_prints_it(dry, text):
    assert dry_run_text(dry) == text


def test_a_slurm_run_through_a_login_node_with_its_own_port():
    lines = dry_run_text(SLURM_LOGIN).splitlines()
    assert all(line in lines for line in SLURM_LOGIN_LINES), lines
