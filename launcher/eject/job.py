"""The workload as any engine needs it, read once from the plan, and the script every node runs there.

An engine starts one container (or one shell) per node and tells it its rank and node 0's address in
its own words (``PET_NODE_RANK``, ``JOB_COMPLETION_INDEX``, ``SKYPILOT_NODE_RANK``...). The node script
turns those into the node contract fsdp-tui gives every node (``NUM_NODES``, ``NODE_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``CODE_SOURCE_PATH``, ``HYPERPARAMETERS_PATH``,
``FSDP_TUI_RUN_ID``, ``FSDP_TUI_METRICS_FILE``), writes the parameters file, and runs the workload's
command or the built-in trainer under torchrun: a ``train.py`` written for ``air`` or for fsdp-tui runs
there unchanged. Pure.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from launcher.workload.plan import DIR_ENV, RunPlan
from trainer.wire.protocol import METRICS_FILE_ENV, RUN_ID_ENV

DYNAMIC_ENV = ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
"""Contract variables only the engine knows on each node: the node script sets them from its words."""
CONTRACT_PATHS = ("CODE_SOURCE_PATH", "HYPERPARAMETERS_PATH", METRICS_FILE_ENV)
DEFAULT_PORT = 29500

ALWAYS_LOST = (
    "the node agent: nothing records each node's pid, state and output for fsdp-tui, and `fsdp-tui "
    "cancel`, `stacks` and `logs` do not reach the job; the engine's own tools do",
    "the live monitor: no per-node panes, no sparklines, no stall or idle-GPU watch, no triage of a "
    "failure; rank 0 still writes its metrics to FSDP_TUI_METRICS_FILE on the node",
    "the MLflow run fsdp-tui logs for each launch (params, metrics, status, artifacts): log from the job "
    "itself if you need it there",
    "the flight recorder dumps' collection and the stall's stack dumps",
)
"""What no other engine gives: fsdp-tui's own side of a run."""
SWEEP_LOST = "sweep: the workload is ejected as written, without its variants; eject one with its keys as --set"


@dataclass(frozen=True)
class Secret:
    """A secret as the workload names it (``NAME: scope/key``): its value never leaves the secret store."""

    env: str
    scope: str
    key: str


@dataclass(frozen=True)
class Job:
    """One workload as an engine needs it: shape, environment, secrets by reference, what runs."""

    name: str
    """The job's name there (letters, digits and ``-``; lower case for Kubernetes)."""
    num_nodes: int
    procs_per_node: int
    kind: str
    """``gpu`` or ``cpu``."""
    gpu_model: str | None
    env: dict[str, str]
    """The node contract's fixed variables and the workload's ``env_variables`` (no secret)."""
    secrets: tuple[Secret, ...]
    parameters_yaml: str
    command: str | None
    """The workload's command; ``None``: the built-in trainer."""
    python: str
    """The interpreter in the engine's image (``eject.python``); never a path of this machine or a node."""
    node_python: str | None
    """``environment.python`` when the workload sets it (an interpreter on its own nodes, left behind)."""
    dependencies: tuple[str, ...]
    max_retries: int
    timeout_s: int | None
    output_dir: str | None
    """The built-in trainer's ``parameters.output_dir`` (checkpoints, exports), as written."""
    code_root: Path | None
    image: str | None
    """``environment.docker_image``'s URL."""
    hosts: tuple[str, ...]
    master_port: int
    source: str
    """The workload file (or ``the workload``), for the header."""
    sweep: bool = False
    """The workload has variants (``sweep:``), which are not ejected."""

    @property
    def builtin_trainer(self) -> bool:
        return self.command is None

    @property
    def gpus_per_node(self) -> int:
        return self.procs_per_node if self.kind == "gpu" else 0


def k8s_name(text: str, limit: int = 40) -> str:
    """``text`` as a DNS-1035 label (what a JobSet's pods and services are named from): lower case,
    ``-`` for anything else, starting with a letter; short enough for the names engines derive from it."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return name if name[:1].isalpha() else f"x-{name}"[:limit].rstrip("-")


def job_of(plan: RunPlan) -> Job:
    w = plan.workload
    node = plan.nodes[0]
    env = {k: v for k, v in node.env.items() if k not in DYNAMIC_ENV}
    env[RUN_ID_ENV] = plan.run_id
    secrets = tuple(Secret(name, *ref.split("/", 1)) for name, ref in w.secrets.items())
    image = w.environment.docker_image.url if w.environment.docker_image is not None else None
    output_dir = w.parameters.get("output_dir") if w.uses_builtin_trainer else None
    return Job(
        name=w.experiment_name, num_nodes=plan.topology.num_nodes, procs_per_node=plan.topology.procs_per_node,
        kind=plan.topology.kind, gpu_model=plan.topology.gpu_model, env=env, secrets=secrets,
        parameters_yaml=plan.parameters_yaml, command=w.command, python=w.eject.python,
        node_python=w.environment.python if "python" in w.environment.model_fields_set else None,
        dependencies=plan.dependencies, max_retries=w.max_retries,
        timeout_s=round(w.timeout_minutes * 60) if w.timeout_minutes else None,
        output_dir=str(output_dir) if output_dir is not None else None, code_root=plan.code_root, image=image,
        hosts=tuple(w.compute.hosts), master_port=w.compute.master_port or DEFAULT_PORT,
        source=str(plan.source_file) if plan.source_file else "the workload", sweep=w.sweep is not None,
    )


@dataclass(frozen=True)
class NodeWords:
    """How an engine tells a node who it is: shell expressions for the dynamic contract variables."""

    node_rank: str
    master_addr: str
    master_port: str
    run_dir: str
    """The node's run directory there (parameters, metrics, a relative ``output_dir``)."""
    code_dir: str
    """Where the code snapshot is there (``CODE_SOURCE_PATH``)."""
    pythonpath: str | None = None
    """A folder holding the ``trainer`` package, when the engine ships it beside the job."""
    install: bool = True
    """Install ``environment.dependencies`` in the script (engines with a setup step do it there)."""


def _heredoc_mark(text: str) -> str:
    mark = "FSDP_TUI_PARAMETERS"
    while mark in text:
        mark += "_"
    return mark


def node_script(job: Job, words: NodeWords) -> str:
    """The shell text one node runs: the contract's variables, the parameters file, the workload."""
    q = shlex.quote
    lines = ["set -eu",
             f"export NODE_RANK={words.node_rank} MASTER_ADDR={words.master_addr} MASTER_PORT={words.master_port}",
             f"export CODE_SOURCE_PATH={words.code_dir} HYPERPARAMETERS_PATH={words.run_dir}/"
             f"{DIR_ENV['HYPERPARAMETERS_PATH']} {METRICS_FILE_ENV}={words.run_dir}/{DIR_ENV[METRICS_FILE_ENV]}"]
    if words.pythonpath is not None:
        lines.append(f'export PYTHONPATH={words.pythonpath}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    lines.append(f'mkdir -p {words.run_dir} && cd {words.run_dir}')
    mark = _heredoc_mark(job.parameters_yaml)
    lines += [f"cat > \"$HYPERPARAMETERS_PATH\" <<'{mark}'", job.parameters_yaml.rstrip("\n"), mark]
    if words.install and job.dependencies:
        lines.append(f"{q(job.python)} -m pip install --quiet " + " ".join(q(d) for d in job.dependencies))
    if job.command is not None:
        lines.append("set +eu  # the command runs as fsdp-tui runs it: bash -c, no -e, no -u")
        lines.append(job.command.rstrip("\n"))
    else:
        lines.append(f"exec {q(job.python)} -m torch.distributed.run --nnodes=\"$NUM_NODES\" "
                     '--node_rank="$NODE_RANK" --nproc_per_node="$LOCAL_WORLD_SIZE" --master_addr="$MASTER_ADDR" '
                     '--master_port="$MASTER_PORT" -m trainer "$HYPERPARAMETERS_PATH"')
    return "\n".join(lines) + "\n"


def common_lost(job: Job, *, pin_hint: str = "pin them with its own node selection if they matter") -> list[str]:
    """What the engines that start their own nodes lose of ``job`` besides :data:`ALWAYS_LOST`."""
    lost: list[str] = list(ALWAYS_LOST)
    if job.sweep:
        lost.append(SWEEP_LOST)
    if job.node_python is not None and job.node_python != job.python:
        lost.append(f"environment.python ({job.node_python}) is an interpreter on your own nodes, not where the "
                    f"engine runs the job: it runs {job.python} there (set eject.python to name another)")
        if job.command is not None and job.node_python in job.command:
            lost.append(f"the command names {job.node_python}: that path is on your nodes; edit the command for "
                        "the engine's machines")
    if job.hosts:
        lost.append(f"compute.hosts ({', '.join(job.hosts)}): the engine picks the nodes; {pin_hint}")
    if job.num_nodes > 1 and not any(n in job.env for n in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")):
        lost.append("the interface that reaches MASTER_ADDR is not looked up on each node: set "
                    "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME in env_variables if gloo or NCCL picks a wrong one")
    return lost


def header_comment(target: str, job: Job, lost: list[str], notes: list[str]) -> str:
    """The ``#`` lines on top of a YAML rendering: where it came from, what does not carry over, how to
    watch the job there."""
    lines = [f"# {target}, ejected by fsdp-tui from {job.source}.",
             "# Secrets are references only: no value is in this file.",
             "# Not carried over:"]
    lines += [f"#  - {item}" for item in lost]
    if notes:
        lines.append("# There:")
        lines += [f"#  - {note}" for note in notes]
    return "\n".join(lines) + "\n"


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (scripts) as ``|`` blocks, readable and diffable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def to_yaml(data: object) -> str:
    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=False, width=1000, allow_unicode=True)
