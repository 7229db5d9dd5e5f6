"""A Kubernetes ``JobSet`` (``jobset.x-k8s.io/v1alpha2``): one Indexed Job of one pod per node, with
DNS hostnames, so node 0 is ``<name>-node-0-0.<name>`` and each pod's ``JOB_COMPLETION_INDEX`` is its
node rank; ``max_retries`` is the JobSet's ``failurePolicy.maxRestarts`` (the whole set restarts, as an
fsdp-tui retry relaunches every node). Pure."""

from __future__ import annotations

from typing import Any

from launcher.eject.job import Job, NodeWords, common_lost, header_comment, k8s_name, node_script, to_yaml
from launcher.eject.kube import CODE_DIR, RUN_DIR, env_list, gpu_limits, pod_lost, secret_notes

API_VERSION = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "node"
DEFAULT_IMAGE = "pytorch/pytorch"
"""The image when the workload names none (``environment.docker_image``): PyTorch's own."""


def words(job: Job) -> NodeWords:
    name = k8s_name(job.name)
    return NodeWords(node_rank='"$JOB_COMPLETION_INDEX"', master_addr=f"{name}-{REPLICATED_JOB}-0-0.{name}",
                     master_port=str(job.master_port), run_dir=RUN_DIR, code_dir=CODE_DIR)


def manifest(job: Job) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": REPLICATED_JOB,
        "image": job.image or DEFAULT_IMAGE,
        "command": ["bash", "-c", node_script(job, words(job))],
        "env": env_list(job),
        "ports": [{"containerPort": job.master_port, "name": "rendezvous"}],
    }
    limits = gpu_limits(job)
    if limits is not None:
        container["resources"] = limits
    job_spec: dict[str, Any] = {
        "parallelism": job.num_nodes, "completions": job.num_nodes, "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
    }
    if job.timeout_s is not None:
        job_spec["activeDeadlineSeconds"] = job.timeout_s
    spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True},
        "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job_spec}}],
    }
    if job.max_retries:
        spec["failurePolicy"] = {"maxRestarts": job.max_retries}
    return {"apiVersion": API_VERSION, "kind": "JobSet",
            "metadata": {"name": k8s_name(job.name), "labels": {"fsdp-tui/experiment": k8s_name(job.name, 63)}},
            "spec": spec}


def lost(job: Job) -> list[str]:
    out = common_lost(job) + pod_lost(job)
    if job.max_retries:
        out.append("a restart reruns every pod from the start: the built-in trainer resumes from output_dir only "
                   "if it is on a volume the new pods see")
    if job.image is None:
        out.append(f"no environment.docker_image: the pods run {DEFAULT_IMAGE}")
    return out


def notes(job: Job) -> list[str]:
    name = k8s_name(job.name)
    return [f"kubectl apply -f FILE; kubectl get jobset {name}",
            f"logs: kubectl logs -f -l jobset.sigs.k8s.io/jobset-name={name} --max-log-requests={job.num_nodes} "
            "--prefix (one stream per node, no panes)",
            "stop: kubectl delete jobset " + name, *secret_notes(job)]


def render(job: Job) -> tuple[str, list[str]]:
    missing = lost(job)
    return header_comment("JobSet", job, missing, notes(job)) + to_yaml(manifest(job)), missing
