"""Starting points for a new workload file: each written with a comment on every key, so the file
itself teaches the format. ``<...>`` marks a value the user must fill in (validation says which)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SAMPLES_ROOT = Path(__file__).resolve().parents[2] / "sample_workloads"


@dataclass(frozen=True)
class Template:
    """One starting point: a short title for the picker, a line on when to use it, the file's text."""

    key: str
    title: str
    summary: str
    text: str


LOCAL_CPU = """\
# Runs on this machine with 2 CPU processes (gloo): no GPU, no SSH, no network needed.
experiment_name: my-cpu-demo        # letters, digits, '_' and '-'; also the MLflow experiment

compute:
  accelerator_type: CPU             # CPU, or GPU_<N>x<MODEL> such as GPU_8xH100
  procs_per_node: 2                 # processes on this machine
  num_accelerators: 2               # processes in all

env_variables:
  OMP_NUM_THREADS: 1                # one thread per process keeps a small machine responsive

# No `command:`, so the built-in FSDP2 trainer runs with these parameters.
parameters:
  model_name: builtin:tiny-llama    # a hub id, a local model folder, or builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca # a hub dataset, a local json/jsonl/parquet file, or builtin:tiny-alpaca
  output_dir: outputs               # relative: inside the run's directory on the node
  max_seq_len: 128                  # tokens per example
  per_device_batch_size: 8          # examples per process per step
  learning_rate: 0.003              # peak learning rate
  max_steps: 100                    # stop after this many optimizer steps
  model:
    from_scratch: true              # random weights: the tiny model has none to download
"""

SSH_BUILTIN = """\
# The built-in FSDP2 trainer on your own machines over SSH: one host per node.
experiment_name: my-sft             # letters, digits, '_' and '-'; also the MLflow experiment

compute:
  accelerator_type: GPU_8xH100      # GPU_<N>x<MODEL>: N GPUs per node
  num_accelerators: 16              # GPUs in all: nodes x GPUs per node
  hosts:                            # ~/.ssh/config aliases or user@host[:port]; the first is node 0
    - <host-0>
    - <host-1>

ssh:
  remote_root: ~/.fsdp-tui          # folder on every node for run directories and venvs

environment:
  python: python3                   # interpreter on the nodes (needs torch >= 2.11)

# No `command:`, so the built-in trainer runs under torchrun with these parameters.
parameters:
  model_name: meta-llama/Llama-3.2-1B   # a hub id or a model folder on the nodes
  dataset_name: tatsu-lab/alpaca        # a hub dataset or a json/jsonl/parquet file on the nodes
  output_dir: outputs                   # relative: on each node's own disk, gathered into node 0 after each save
  max_seq_len: 1024                     # tokens per example
  per_device_batch_size: 4              # examples per GPU per step
  learning_rate: 0.00002                # peak learning rate
  max_steps: 200                        # stop after this many optimizer steps
  fsdp:
    sharding: full_shard                # full_shard, shard_grad_op, hybrid_shard or no_shard
  checkpoint:
    every_steps: 100                    # save a checkpoint this often
"""

SSH_BUILTIN_CPU = """\
# The built-in FSDP2 trainer on your own machines over SSH, CPU only (gloo): the multi-node path on two
# small machines, no GPU needed. One host per node; the tiny model is built on each node, nothing downloads.
experiment_name: my-cpu-sft         # letters, digits, '_' and '-'; also the MLflow experiment

compute:
  accelerator_type: CPU             # CPU: processes per node below, gloo between them
  procs_per_node: 2                 # processes on each node
  num_accelerators: 4               # processes in all: nodes x procs_per_node
  hosts:                            # ~/.ssh/config aliases or user@host[:port]; the first is node 0
    - <host-0>
    - <host-1>

ssh:
  remote_root: ~/.fsdp-tui          # folder on every node for run directories and venvs

environment:
  python: python3                   # interpreter on the nodes (needs torch >= 2.11; the CPU build is enough)

env_variables:
  OMP_NUM_THREADS: 1                # one thread per process keeps a small machine responsive

# No `command:`, so the built-in trainer runs under torchrun with these parameters.
parameters:
  model_name: builtin:tiny-llama    # a hub id, a model folder on the nodes, or builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca # a hub dataset, a json/jsonl/parquet file on the nodes, or builtin:tiny-alpaca
  output_dir: outputs               # relative: on each node's own disk, gathered into node 0 after each save
  max_seq_len: 128                  # tokens per example
  per_device_batch_size: 8          # examples per process per step
  learning_rate: 0.003              # peak learning rate
  max_steps: 100                    # stop after this many optimizer steps
  model:
    from_scratch: true              # random weights: the tiny model has none to download
  checkpoint:
    every_steps: 50                 # save a checkpoint this often
"""

SSH_SCRIPT = """\
# Your own air-style train.py (next to this file) under torchrun on SSH hosts, unmodified.
experiment_name: my-script          # letters, digits, '_' and '-'; also the MLflow experiment

compute:
  accelerator_type: GPU_8xH100      # GPU_<N>x<MODEL>: N GPUs per node
  num_accelerators: 16              # GPUs in all: nodes x GPUs per node
  hosts:                            # ~/.ssh/config aliases or user@host[:port]; the first is node 0
    - <host-0>
    - <host-1>

environment:
  dependencies:                     # pip requirements installed into a cached venv on each node
    - transformers>=4.45

code_source:
  type: snapshot                    # upload a local folder to every node
  snapshot:
    root_path: .                    # the folder, relative to this file; $CODE_SOURCE_PATH on the nodes

# fsdp-tui sets NUM_NODES, NODE_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT on every node.
command: |                          # shell text, run once per node
  cd "$CODE_SOURCE_PATH"
  torchrun --nnodes="$NUM_NODES" --node_rank="$NODE_RANK" \\
    --nproc_per_node="$LOCAL_WORLD_SIZE" \\
    --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" \\
    train.py

# Free-form: written to $HYPERPARAMETERS_PATH (YAML) on each node for your script to read.
parameters:
  max_steps: 100                    # your script decides what these mean
"""

SSH_SCRIPT_CPU = """\
# Your own air-style train.py (next to this file) under torchrun on SSH hosts, CPU only: it picks gloo
# when there is no GPU (torch.distributed.init_process_group("gloo")).
experiment_name: my-cpu-script      # letters, digits, '_' and '-'; also the MLflow experiment

compute:
  accelerator_type: CPU             # CPU: processes per node below
  procs_per_node: 2                 # processes on each node
  num_accelerators: 4               # processes in all: nodes x procs_per_node
  hosts:                            # ~/.ssh/config aliases or user@host[:port]; the first is node 0
    - <host-0>
    - <host-1>

env_variables:
  OMP_NUM_THREADS: 1                # one thread per process keeps a small machine responsive

code_source:
  type: snapshot                    # upload a local folder to every node
  snapshot:
    root_path: .                    # the folder, relative to this file; $CODE_SOURCE_PATH on the nodes

# fsdp-tui sets NUM_NODES, NODE_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT on every node.
command: |                          # shell text, run once per node
  cd "$CODE_SOURCE_PATH"
  torchrun --nnodes="$NUM_NODES" --node_rank="$NODE_RANK" \\
    --nproc_per_node="$LOCAL_WORLD_SIZE" \\
    --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" \\
    train.py

# Free-form: written to $HYPERPARAMETERS_PATH (YAML) on each node for your script to read.
parameters:
  max_steps: 100                    # your script decides what these mean
"""

SLURM_BUILTIN = """\
# The built-in FSDP2 trainer on a SLURM cluster: one batch job, submitted through the login node.
experiment_name: my-slurm-sft       # letters, digits, '_' and '-'; also the MLflow experiment

compute:
  accelerator_type: GPU_8xH100      # GPU_<N>x<MODEL>: N GPUs per node (--gpus-per-node)
  num_accelerators: 16              # GPUs in all: nodes x GPUs per node (--nodes)
  slurm:
    login: <login-node>             # ~/.ssh/config alias or user@host; `local` on the login node itself
    partition: <partition>          # `sinfo` lists them
    time: "04:00:00"                # --time per job; near it the trainer checkpoints, a new job resumes
    job_dir: ~/fsdp-tui-jobs        # a folder the login and compute nodes share

environment:
  python: python3                   # interpreter on the compute nodes (needs torch >= 2.11)

# No `command:`, so the built-in trainer runs under torchrun with these parameters.
parameters:
  model_name: meta-llama/Llama-3.2-1B   # a hub id or a model folder the nodes can read
  dataset_name: tatsu-lab/alpaca        # a hub dataset or a json/jsonl/parquet file
  output_dir: outputs                   # relative: in the run's folder under job_dir (shared)
  max_seq_len: 1024                     # tokens per example
  per_device_batch_size: 4              # examples per GPU per step
  learning_rate: 0.00002                # peak learning rate
  max_steps: 200                        # stop after this many optimizer steps
  checkpoint:
    every_steps: 100                    # save a checkpoint this often
"""

SLURM_BUILTIN_CPU = """\
# The built-in FSDP2 trainer on a SLURM cluster's CPU nodes (gloo): one batch job through the login node.
experiment_name: my-slurm-cpu       # letters, digits, '_' and '-'; also the MLflow experiment

compute:
  accelerator_type: CPU             # CPU: processes per node below (--ntasks-per-node is 1, torchrun starts them)
  procs_per_node: 2                 # processes on each node
  num_accelerators: 4               # processes in all: nodes x procs_per_node (--nodes)
  slurm:
    login: <login-node>             # ~/.ssh/config alias or user@host; `local` on the login node itself
    partition: <partition>          # `sinfo` lists them
    time: "01:00:00"                # --time per job; near it the trainer checkpoints, a new job resumes
    job_dir: ~/fsdp-tui-jobs        # a folder the login and compute nodes share

environment:
  python: python3                   # interpreter on the compute nodes (needs torch >= 2.11; the CPU build is enough)

env_variables:
  OMP_NUM_THREADS: 1                # one thread per process

# No `command:`, so the built-in trainer runs under torchrun with these parameters.
parameters:
  model_name: builtin:tiny-llama    # a hub id, a model folder the nodes can read, or builtin:tiny-llama
  dataset_name: builtin:tiny-alpaca # a hub dataset, a json/jsonl/parquet file, or builtin:tiny-alpaca
  output_dir: outputs               # relative: in the run's folder under job_dir (shared)
  max_seq_len: 128                  # tokens per example
  per_device_batch_size: 8          # examples per process per step
  learning_rate: 0.003              # peak learning rate
  max_steps: 100                    # stop after this many optimizer steps
  model:
    from_scratch: true              # random weights: the tiny model has none to download
  checkpoint:
    every_steps: 50                 # save a checkpoint this often
"""

BUILTIN = (
    Template("local-cpu", "This machine, CPU demo",
             "the built-in trainer on a tiny model, 2 CPU processes here", LOCAL_CPU),
    Template("ssh-builtin", "N SSH hosts, built-in trainer",
             "FSDP2 fine-tuning of a hub model on your GPU machines", SSH_BUILTIN),
    Template("ssh-builtin-cpu", "N SSH hosts, built-in trainer, CPU",
             "the same on small machines without GPUs: a tiny model, gloo", SSH_BUILTIN_CPU),
    Template("ssh-script", "Your train.py on SSH hosts",
             "an air-style script under torchrun, code uploaded from here", SSH_SCRIPT),
    Template("ssh-script-cpu", "Your train.py on SSH hosts, CPU",
             "the same on machines without GPUs (your script picks gloo)", SSH_SCRIPT_CPU),
    Template("slurm-builtin", "SLURM cluster, built-in trainer",
             "a batch job through the login node; checkpoints ahead of the time limit", SLURM_BUILTIN),
    Template("slurm-builtin-cpu", "SLURM cluster, built-in trainer, CPU",
             "the same on CPU nodes: a tiny model, gloo", SLURM_BUILTIN_CPU),
)
"""The starting points; each one for GPUs has a CPU variant (its key with ``-cpu``), to try it where there is
no GPU."""


def templates(samples_root: Path = SAMPLES_ROOT) -> list[Template]:
    """The built-in starting points, then each shipped sample workload as it is."""
    out = list(BUILTIN)
    if samples_root.is_dir():
        for path in sorted(samples_root.rglob("*.yaml")):
            rel = path.relative_to(samples_root)
            out.append(Template(f"sample:{rel}", f"Sample: {rel}", _first_comment(path), path.read_text("utf-8")))
    return out


def _first_comment(path: Path) -> str:
    """The first sentence of the file's opening comment, whole (it may run over several lines)."""
    words: list[str] = []
    for line in path.read_text("utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text or text.startswith("fsdp-tui "):
            break  # a blank comment line or an example command ends the prose
        words.append(text)
    prose = " ".join(words)
    end = re.search(r"\.(\s|$)", prose)
    sentence = (prose[:end.start()] if end else prose).rstrip(":").replace("`", "")
    return sentence or "a shipped sample"


def is_blank(text: str) -> bool:
    """An empty buffer (only whitespace or comments): the editor offers templates for it."""
    return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())


def write_template(template: Template, path: Path) -> Path:
    """Write ``template`` to a new file at ``path`` (never over an existing one)."""
    with path.open("x", encoding="utf-8") as out:
        out.write(template.text)
    return path
