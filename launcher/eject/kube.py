"""What a Kubernetes rendering shares, a Kubeflow ``TrainJob`` or a ``JobSet``: the container's
environment with secrets as ``secretKeyRef``, the GPU request, the node script's paths, and what a pod
does not carry. Pure."""

from __future__ import annotations

from typing import Any

from launcher.eject.job import Job, k8s_name

RUN_DIR = "/workspace/run"
CODE_DIR = "/workspace/code"
GPU_RESOURCE = "nvidia.com/gpu"


def secret_ref(scope: str) -> str:
    """The Kubernetes Secret that holds a scope's keys (a DNS name: lower case, ``-``)."""
    return k8s_name(scope, 253)


def env_list(job: Job) -> list[dict[str, Any]]:
    """``env`` of the training container: values as text, each secret a ``secretKeyRef``."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(job.env.items())]
    env += [{"name": s.env, "valueFrom": {"secretKeyRef": {"name": secret_ref(s.scope), "key": s.key}}}
            for s in job.secrets]
    return env


def gpu_limits(job: Job) -> dict[str, Any] | None:
    return {"limits": {GPU_RESOURCE: str(job.gpus_per_node)}} if job.gpus_per_node else None


def pod_lost(job: Job) -> list[str]:
    """What a pod does not get that an fsdp-tui node does."""
    lost = []
    if job.code_root is not None:
        lost.append(f"the code snapshot ({job.code_root}) is not uploaded: build it into the image at "
                    f"{CODE_DIR} (CODE_SOURCE_PATH points there) or mount it there")
    if job.builtin_trainer:
        lost.append("the built-in trainer is not shipped: the image needs fsdp-tui's `trainer` package on its "
                    "Python path and the packages of its `trainer` extra (pip install 'fsdp-tui[trainer]')")
    if job.output_dir is not None:
        where = job.output_dir if job.output_dir.startswith(("/", "~")) or "://" in job.output_dir \
            else f"{RUN_DIR}/{job.output_dir}"
        lost.append(f"output_dir {where} is on the pod's own disk unless a volume is mounted there (or "
                    "output_dir is a bucket URL): checkpoints go with the pod")
    return lost


def secret_notes(job: Job) -> list[str]:
    notes = []
    for s in job.secrets:
        name = secret_ref(s.scope)
        renamed = f" (scope {s.scope} as a Kubernetes name)" if name != s.scope else ""
        notes.append(f"{s.env} reads key {s.key} of Secret {name}{renamed}: kubectl create secret generic "
                     f"{name} --from-literal={s.key}=VALUE")
    return notes
