"""SLURM's commands, run by the login node's agent for the launcher: submit, queue, cancel, partitions.

Only the scheduler's own commands run this way. What ``sbatch`` must pass on to the job without writing
it anywhere (secrets) arrives in the request's body and goes into ``sbatch``'s environment only.
"""

from __future__ import annotations

import json
import os
import subprocess

COMMANDS = frozenset({"sbatch", "squeue", "scancel", "sinfo", "sacct", "scontrol", "srun", "sacctmgr"})


def run(node_dir: str, argv: list, env_body: bytes, in_run_dir: bool, timeout_s: float) -> dict:
    """``argv`` (a SLURM command) on this node; in the run directory (the parent of ``node_dir``) when asked."""
    if not argv or os.path.basename(str(argv[0])) not in COMMANDS:
        raise ValueError(f"not a SLURM command: {argv[:1]}")
    env = dict(os.environ)
    if env_body:
        env.update({str(k): str(v) for k, v in json.loads(env_body.decode("utf-8")).items()})
    cwd = os.path.dirname(os.path.abspath(node_dir)) if in_run_dir else None
    try:
        out = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True,
                             timeout=timeout_s, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return {"exit_status": 127, "stdout": "",
                "stderr": f"{argv[0]}: not found on this node's PATH (is this a SLURM login node?)"}
    except subprocess.TimeoutExpired:
        return {"exit_status": None, "stdout": "", "stderr": f"{argv[0]} gave no answer within {timeout_s:.0f} s"}
    return {"exit_status": out.returncode, "stdout": out.stdout, "stderr": out.stderr}
