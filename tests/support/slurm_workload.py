"""A SLURM workload as a user writes one (two nodes of 8 H100s, account, qos, time, constraint, extra
#SBATCH lines, a secret) and its plan, for the tests that need no cluster: the batch script, the doctor's
judgement of ``sinfo``, the task usage a node reports."""

from __future__ import annotations

WORKLOAD = """\
experiment_name: squad-560m
compute:
  num_accelerators: 16
  accelerator_type: GPU_8xH100
  slurm:
    login: alice@login.cluster.example
    partition: gpu
    account: nlp
    qos: high
    time: "04:00:00"
    constraint: h100&ib
    exclusive: true
    extra_sbatch: ["#SBATCH --mail-type=END", "--comment=squad"]
    job_dir: /shared/alice/fsdp-tui
environment:
  python: /shared/alice/venv/bin/python
env_variables:
  NCCL_DEBUG: WARN
secrets:
  HF_TOKEN: hf/token
parameters:
  model_name: bigscience/bloom-560m
  dataset_name: squad
  output_dir: checkpoints
"""


def slurm_plan(text: str = WORKLOAD):
    """The plan of ``text`` (valid, or the test fails naming its problems), run id and node root fixed."""
    from launcher.workload.plan import build_plan
    from launcher.workload.validate import validate_text

    result = validate_text(text, "w.yaml")
    assert result.ok, [p.format() for p in result.problems]
    return build_plan(result.workload, run_id="20261123-1200-squad-560m-abcd", node_root="/shared/alice/fsdp-tui")
