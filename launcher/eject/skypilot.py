"""A SkyPilot task YAML: ``num_nodes`` machines, the code snapshot as ``workdir`` (SkyPilot uploads it
to every node), the built-in trainer as a ``file_mounts`` upload, dependencies in ``setup``, secrets as
``secrets`` names whose values ``sky launch --secret NAME`` takes from the environment. The node script
reads ``SKYPILOT_NODE_RANK`` and the head node's address from ``SKYPILOT_NODE_IPS``. Pure."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shlex
from typing import Any

from launcher.eject.job import Job, NodeWords, common_lost, header_comment, node_script, to_yaml

RUN_DIR = '"$HOME/fsdp-tui-run"'
WORKDIR = '"$HOME/sky_workdir"'
"""Where SkyPilot puts ``workdir`` on every node (and where ``run`` starts)."""
TRAINER_MOUNT = "~/fsdp-tui-pkg/trainer"


def words(job: Job) -> NodeWords:
    return NodeWords(node_rank='"$SKYPILOT_NODE_RANK"', master_addr='"$(echo "$SKYPILOT_NODE_IPS" | head -n1)"',
                     master_port=str(job.master_port), run_dir=RUN_DIR, code_dir=WORKDIR,
                     pythonpath='"$HOME/fsdp-tui-pkg"' if job.builtin_trainer else None, install=False)


def trainer_dir() -> str:
    """The ``trainer`` package on this machine, as SkyPilot uploads it (found without importing it)."""
    spec = importlib.util.find_spec("trainer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the trainer package is not installed beside the launcher: reinstall fsdp-tui")
    return str(next(iter(spec.submodule_search_locations)))


def trainer_requirements() -> list[str]:
    """The ``trainer`` extra of fsdp-tui as installed here (what the built-in trainer needs on a node)."""
    try:
        requires = importlib.metadata.requires("fsdp-tui") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    return [r.split(";")[0].strip() for r in requires if 'extra == "trainer"' in r]


def resources(job: Job) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if job.kind == "gpu":
        res["accelerators"] = f"{job.gpu_model or 'GPU'}:{job.gpus_per_node}"
    else:
        res["cpus"] = f"{job.procs_per_node}+"
    if job.image is not None:
        res["image_id"] = f"docker:{job.image}"
    if job.max_retries:
        res["job_recovery"] = {"max_restarts_on_errors": job.max_retries}
    return res


def task(job: Job) -> dict[str, Any]:
    out: dict[str, Any] = {"name": job.name}
    if job.code_root is not None:
        out["workdir"] = str(job.code_root)
    out["num_nodes"] = job.num_nodes
    out["resources"] = resources(job)
    out["envs"] = dict(sorted(job.env.items()))
    if job.secrets:
        out["secrets"] = {s.env: None for s in job.secrets}
    if job.builtin_trainer:
        out["file_mounts"] = {TRAINER_MOUNT: trainer_dir()}
    installs = [*job.dependencies, *(trainer_requirements() if job.builtin_trainer else [])]
    if installs:
        out["setup"] = f"{shlex.quote(job.python)} -m pip install --quiet " + " ".join(shlex.quote(r) for r in installs) + "\n"
    out["run"] = node_script(job, words(job))
    return out


def lost(job: Job) -> list[str]:
    out = common_lost(job, pin_hint="machines you already have become an SSH Node Pool of SkyPilot's "
                      "(resources.infra: ssh/<pool>)")
    if job.timeout_s is not None:
        out.append(f"timeout_minutes ({job.timeout_s / 60:g}): a SkyPilot task has no time limit; cancel it with "
                   "sky cancel / sky jobs cancel")
    if job.max_retries:
        out.append(f"max_retries ({job.max_retries}) holds only as a managed job (sky jobs launch), as "
                   "job_recovery.max_restarts_on_errors; sky launch runs it once")
    if job.output_dir is not None:
        out.append(f"output_dir {job.output_dir} is on each node's own disk: mount a bucket there with "
                   "file_mounts to keep checkpoints past sky down")
    return out


def notes(job: Job) -> list[str]:
    secrets = "".join(f" --secret {s.env}" for s in job.secrets)
    return [f"sky launch -c CLUSTER FILE{secrets} (or sky jobs launch FILE{secrets}); secret values come from "
            "this shell's environment",
            "logs: sky logs CLUSTER (every node's lines in one stream, prefixed by node)",
            "stop: sky cancel CLUSTER, then sky down CLUSTER"]


def render(job: Job) -> tuple[str, list[str]]:
    missing = lost(job)
    return header_comment("SkyPilot task", job, missing, notes(job)) + to_yaml(task(job)), missing
