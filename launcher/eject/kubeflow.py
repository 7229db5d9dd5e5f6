"""A Kubeflow Trainer v2 ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``) on the ``torch-distributed``
runtime: the runtime starts one pod per node and gives each torchrun's ``PET_*`` variables; the node
script turns them into the node contract. Pure."""

from __future__ import annotations

from typing import Any

from launcher.eject.job import Job, NodeWords, common_lost, header_comment, k8s_name, node_script, to_yaml
from launcher.eject.kube import CODE_DIR, RUN_DIR, env_list, gpu_limits, pod_lost, secret_notes

API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "torch-distributed"
"""The ClusterTrainingRuntime Kubeflow Trainer installs for PyTorch (torchrun's ``PET_*`` variables)."""
WORDS = NodeWords(node_rank='"$PET_NODE_RANK"', master_addr='"$PET_MASTER_ADDR"',
                  master_port='"$PET_MASTER_PORT"', run_dir=RUN_DIR, code_dir=CODE_DIR)


def manifest(job: Job) -> dict[str, Any]:
    trainer: dict[str, Any] = {
        "command": ["bash", "-c", node_script(job, WORDS)],
        "env": env_list(job),
        "numNodes": job.num_nodes,
        "numProcPerNode": job.procs_per_node,
    }
    if job.image is not None:
        trainer["image"] = job.image
    limits = gpu_limits(job)
    if limits is not None:
        trainer["resourcesPerNode"] = limits
    spec: dict[str, Any] = {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                           "name": RUNTIME}, "trainer": trainer}
    if job.timeout_s is not None:
        spec["activeDeadlineSeconds"] = job.timeout_s
    return {"apiVersion": API_VERSION, "kind": "TrainJob",
            "metadata": {"name": k8s_name(job.name), "labels": {"fsdp-tui/experiment": k8s_name(job.name, 63)}},
            "spec": spec}


def lost(job: Job) -> list[str]:
    out = common_lost(job) + pod_lost(job)
    if job.max_retries:
        out.append(f"max_retries ({job.max_retries}): a TrainJob has no retry count; the runtime's JobSet "
                   f"failure policy decides ({RUNTIME}: none)")
    if job.image is None:
        out.append(f"no environment.docker_image: the pods run {RUNTIME}'s own image")
    return out


def notes(job: Job) -> list[str]:
    name = k8s_name(job.name)
    return [f"kubectl apply -f FILE; kubectl get trainjob {name}",
            f"logs: kubectl logs -f -l jobset.sigs.k8s.io/jobset-name={name} --max-log-requests={job.num_nodes} "
            "--prefix (one stream per node, no panes)",
            "stop: kubectl delete trainjob " + name, *secret_notes(job)]


def render(job: Job) -> tuple[str, list[str]]:
    """The YAML text (with its header) and what it cannot express."""
    missing = lost(job)
    text = header_comment("Kubeflow Trainer v2 TrainJob", job, missing, notes(job))
    return text + to_yaml(manifest(job)), missing
