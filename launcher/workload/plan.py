"""What each node will run: host, rank, directory, environment and argv. Pure; touches no host."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from launcher.words import plural
from launcher.workload.air_rules import read_dependencies
from launcher.workload.ckpt_place import CheckpointPlace, place_from_json, place_to_json
from launcher.workload.container import container_script
from launcher.workload.hosts import HostTarget, parse_host
from launcher.workload.model import Workload
from launcher.workload.topology import Topology, resolve_topology
from trainer.wire.protocol import METRICS_FILE_ENV, RUN_ID_ENV

DEFAULT_NODE_ROOT = "~/.fsdp-tui/runs"
DEFAULT_MASTER_PORT = 29500
LOCAL_MASTER_ADDR = "127.0.0.1"
SLURM_FIRST_NODE = "<first node of the SLURM job>"
"""``MASTER_ADDR`` of a SLURM run until the job has its nodes: each node's task sets the real one."""
# Paths relative to the node's run directory; the node agent makes them absolute there.
DIR_ENV = {
    "CODE_SOURCE_PATH": "code",
    "HYPERPARAMETERS_PATH": "parameters.yaml",
    METRICS_FILE_ENV: "metrics.jsonl",
}
FLIGHT_RECORDER_ENV = {"TORCH_FR_BUFFER_SIZE": "2000"}
"""Torch's flight recorder on (gloo and NCCL): each process group keeps its last 2,000 collectives, a few
hundred bytes each; on a stall their dumps name the rank that never entered a collective (docs/ranks.md).
Only the new name: every supported torch reads it, and setting the old ``TORCH_NCCL_TRACE_BUFFER_SIZE``
as well makes every rank print a deprecation warning."""
FLIGHT_RECORDER_DUMP = ("TORCH_FR_DUMP_TEMP_FILE", "flight-recorder-")
"""Where dumps go, in the node's directory: NCCL's own on a watchdog timeout, the trainer's when asked."""
IFACE_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
"""Set on each node of a multi-node run to the interface that reaches ``MASTER_ADDR`` (found there by
the agent) unless the workload sets them: gloo otherwise binds to the address of the hostname, which
stock hosts files map to 127.0.1.1, and the job hangs at its first collective."""
RANK_TAG_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
"""torchrun starts each line it tees to the node's log with this (``$rank``: the worker's global rank). The
node's agent sets it to ``RANK_TAG_TEMPLATE``, an escape sequence no terminal shows, so the log
reads as before and every line still says which rank wrote it: ``fsdp-tui logs RUN --rank R``, the node
pane's rank picker. A workload that sets it keeps its own (and its lines carry no rank)."""
RANK_TAG_TEMPLATE = "\x1b_fsdp-tui rank=${rank}\x1b\\"
"""An APC string (ESC _ ... ESC backslash): terminals ignore it and the display's sanitizer drops it, so a
tagged line shows as the job wrote it (``launcher.runs.core.display`` reads the rank back)."""
TEE_ENV = {"PET_TEE": "3", "PYTHONUNBUFFERED": "1"}
"""torchrun tees every worker's stdout and stderr (``--tee 3``, through its ``PET_`` variables, so a
workload's own ``torchrun`` line gets it too) into files under ``PET_LOG_DIR`` and on to the node's log,
tagged by rank; unbuffered, so a teed line reaches the log when it is written, not 8 KiB later."""
TEE_DIR = ("PET_LOG_DIR", "ranks")
"""Where torchrun keeps those per-rank files: the run directory (the agent removes them when the job ends:
they hold the job's bytes unmasked, and the node's log has every line)."""
TRAINER_PKG_DIR = "pkg"
"""Where the launcher puts the ``trainer`` package on a node when the built-in trainer runs."""


@dataclass(frozen=True)
class NodePlan:
    node_rank: int
    host: HostTarget | None
    """``None``: this machine, no SSH."""
    node_dir: str
    """This node's run directory (may start with ``~/``); per node, as nodes may share a home."""
    env: dict[str, str]
    """Environment without secrets and without the path variables in ``dir_env``."""
    dir_env: dict[str, str]
    """Variables whose values are paths relative to ``node_dir``."""
    argv: tuple[str, ...]
    iface_env: tuple[str, ...] = ()
    """Variables the node sets to its interface that reaches ``MASTER_ADDR`` (see ``IFACE_ENV``)."""
    rank_tag: bool = False
    """The node's agent sets ``RANK_TAG_ENV`` (the workload does not)."""
    display: str | None = None
    """How the node is named when its host is not the machine it runs on (a SLURM node, reached through
    the login node ``host``)."""

    @property
    def host_display(self) -> str:
        if self.display is not None:
            return self.display
        return self.host.display if self.host is not None else "this machine"


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    workload: Workload
    topology: Topology
    nodes: tuple[NodePlan, ...]
    master_addr: str
    master_port: int
    parameters_yaml: str
    code_root: Path | None
    source_file: Path | None
    secret_names: tuple[str, ...]
    blockers: tuple[str, ...] = field(default=())
    """Why this plan cannot run as it stands (e.g. an ``air`` file without hosts)."""
    node_root: str = DEFAULT_NODE_ROOT
    """The folder of run directories on the nodes (``<node_root>/<run_id>/node-<rank>``)."""
    dependencies: tuple[str, ...] = ()
    """``environment.dependencies`` as pip takes them (read from the requirements file when it names one)."""
    master_addr_is_alias: bool = False
    """``master_addr`` is node 0's target as written (an ``~/.ssh/config`` alias, maybe): the backend
    that reaches the nodes resolves it to the address they dial (:func:`with_rendezvous`)."""
    ckpt_place: CheckpointPlace | None = None
    """Where ``parameters.output_dir`` lands on the nodes, as a launch found it (``None``: not asked yet)."""

    @property
    def venv_root(self) -> str:
        """Where each node keeps the venvs of ``environment.dependencies``, one per hash, shared by runs."""
        return f"{self.node_root.rsplit('/', 1)[0]}/venvs" if "/" in self.node_root else "venvs"

    @property
    def uses_builtin_trainer(self) -> bool:
        return self.workload.uses_builtin_trainer

    @property
    def output_dir(self) -> str | None:
        """``parameters.output_dir`` as written (the nodes expand it), when the workload has one."""
        value = self.workload.parameters.get("output_dir")
        return value if isinstance(value, str) and value else None

    @property
    def gather_to(self) -> str:
        """``parameters.checkpoint.gather_to`` (the built-in trainer's schema checked it), ``node0`` unset."""
        ckpt = self.workload.parameters.get("checkpoint")
        value = ckpt.get("gather_to") if isinstance(ckpt, dict) else None
        return value if isinstance(value, str) and value else "node0"


def build_plan(workload: Workload, *, run_id: str, source_file: Path | None = None,
               master_port: int | None = None, node_root: str | None = None) -> RunPlan:
    """The per-node plan for a valid workload. ``node_root`` defaults to ``runs/`` in ``ssh.remote_root``."""
    topo = resolve_topology(workload)
    blockers: list[str] = []
    hosts: list[HostTarget | None] = list(topo.hosts) or [None]
    slurm = workload.compute.slurm
    if slurm is not None:
        login = None if slurm.login == "local" else parse_host(slurm.login)
        hosts = [login] * topo.num_nodes
    elif topo.num_nodes > 1 and not topo.hosts:
        blockers.append(f"compute.hosts is missing: list {topo.num_nodes} SSH hosts (one per node) to run "
                        "this outside Databricks")
        hosts = [HostTarget(alias=f"<host of node {i}>", hostname=f"node{i}") for i in range(topo.num_nodes)]
    master_addr = workload.compute.master_addr or _master_addr(hosts[0])
    alias = workload.compute.master_addr is None and hosts[0] is not None and not hosts[0].is_local
    port = master_port or workload.compute.master_port or DEFAULT_MASTER_PORT
    root = (node_root or f"{workload.ssh.remote_root.rstrip('/')}/runs").rstrip("/")
    if slurm is not None:
        master_addr, alias = SLURM_FIRST_NODE, False
        root = (node_root or slurm.job_dir).rstrip("/")
    base = source_file.parent if source_file is not None else Path.cwd()
    dependencies = workload.environment.dependencies
    if isinstance(dependencies, str):
        dependencies, problem = read_dependencies(dependencies, base)
        if problem:
            blockers.append(problem)
    code_root = None
    if workload.code_source is not None:
        code_root = (base / workload.code_source.snapshot.root_path).expanduser().resolve()
    iface_env = tuple(n for n in IFACE_ENV if n not in workload.env_variables) if topo.num_nodes > 1 else ()
    nodes = []
    for rank, host in enumerate(hosts):
        env = {
            "NUM_NODES": str(topo.num_nodes),
            "NODE_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(topo.procs_per_node),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(port),
            RUN_ID_ENV: run_id,
            **FLIGHT_RECORDER_ENV,
            **TEE_ENV,
            **workload.env_variables,
        }
        dir_env = dict(DIR_ENV)
        for name, value in (FLIGHT_RECORDER_DUMP, TEE_DIR):
            if name not in workload.env_variables:
                dir_env.setdefault(name, value)
        rank_tag = RANK_TAG_ENV not in workload.env_variables
        if workload.uses_builtin_trainer:
            dir_env["PYTHONPATH"] = TRAINER_PKG_DIR
        nodes.append(NodePlan(
            node_rank=rank,
            host=host,
            node_dir=f"{root}/{run_id}/node-{rank}",
            env=env,
            dir_env=dir_env,
            argv=_argv(workload, topo, rank, master_addr, port,
                       [*env, *dir_env, *workload.secrets, *iface_env, *([RANK_TAG_ENV] if rank_tag else [])],
                       _local_python(workload) if slurm is None and (host is None or host.is_local) else None),
            iface_env=iface_env,
            rank_tag=rank_tag,
            display=f"SLURM node {rank} via {host.display if host else 'this machine'}"
            if slurm is not None else None,
        ))
    return RunPlan(
        run_id=run_id,
        workload=workload,
        topology=topo,
        nodes=tuple(nodes),
        master_addr=master_addr,
        master_port=port,
        parameters_yaml=yaml.safe_dump(workload.parameters, sort_keys=False, allow_unicode=True),
        code_root=code_root,
        source_file=source_file,
        secret_names=tuple(workload.secrets),
        blockers=tuple(blockers),
        node_root=root,
        dependencies=tuple(dependencies),
        master_addr_is_alias=alias,
    )


def with_rendezvous(plan: RunPlan, *, addr: str | None = None, port: int | None = None) -> RunPlan:
    """The same plan with its rendezvous at ``addr``/``port`` (every node's ``MASTER_ADDR``/``MASTER_PORT``
    and the built-in trainer's torchrun argv); what is not given stays."""
    addr = addr or plan.master_addr
    port = port or plan.master_port
    flags = {"--master_addr=": addr, "--master_port=": str(port)}

    def argv(node: NodePlan) -> tuple[str, ...]:
        if not plan.uses_builtin_trainer:
            return node.argv  # the command reads $MASTER_ADDR / $MASTER_PORT
        return tuple(next((f + v for f, v in flags.items() if a.startswith(f)), a) for a in node.argv)

    nodes = tuple(replace(n, env={**n.env, "MASTER_ADDR": addr, "MASTER_PORT": str(port)}, argv=argv(n))
                  for n in plan.nodes)
    return replace(plan, master_addr=addr, master_port=port, nodes=nodes,
                   master_addr_is_alias=plan.master_addr_is_alias and addr == plan.master_addr)


def with_master_port(plan: RunPlan, port: int) -> RunPlan:
    """The same plan with its rendezvous on ``port``."""
    return with_rendezvous(plan, port=port)


def with_node_dirs(plan: RunPlan, dirs: list[str] | tuple[str, ...]) -> RunPlan:
    """The same plan with each node's run directory as given (a node swapped in has one of its own)."""
    if len(dirs) != len(plan.nodes):
        raise ValueError(f"{plural(len(dirs), 'directory')} for {plural(len(plan.nodes), 'node')}")
    return replace(plan, nodes=tuple(replace(n, node_dir=d) for n, d in zip(plan.nodes, dirs, strict=True)))


def plan_to_json(plan: RunPlan) -> dict:
    """What rebuilds the same plan later (:func:`plan_from_json`): the resolved workload and the choices
    made at launch (node root, rendezvous)."""
    return {"run_id": plan.run_id, "workload": plan.workload.model_dump(mode="json"),
            "source_file": str(plan.source_file) if plan.source_file else None, "node_root": plan.node_root,
            "master_addr": plan.master_addr, "master_port": plan.master_port,
            "master_addr_is_alias": plan.master_addr_is_alias, "dependencies": list(plan.dependencies),
            "ckpt_place": place_to_json(plan.ckpt_place), "node_dirs": [n.node_dir for n in plan.nodes]}


def plan_from_json(data: dict) -> RunPlan:
    workload = Workload.model_validate(data["workload"])
    plan = build_plan(workload, run_id=data["run_id"],
                      source_file=Path(data["source_file"]) if data.get("source_file") else None,
                      node_root=data["node_root"])
    plan = with_rendezvous(plan, addr=data["master_addr"], port=data["master_port"])
    if "dependencies" in data:  # as the run had them, whatever its requirements file says today
        plan = replace(plan, dependencies=tuple(data["dependencies"]),
                       blockers=tuple(b for b in plan.blockers if "requirements file" not in b))
    dirs = data.get("node_dirs")
    if (isinstance(dirs, list) and len(dirs) == len(plan.nodes)
            and all(isinstance(d, str) and plan.run_id in d for d in dirs)):
        plan = with_node_dirs(plan, dirs)  # a node swapped in works in a directory of its own (of its run:
        # another run's plan taken for a new run, as a sweep's resumed variant, never works in the old one's)
    return replace(plan, master_addr_is_alias=bool(data.get("master_addr_is_alias")),
                   ckpt_place=place_from_json(data.get("ckpt_place")))


def _master_addr(host: HostTarget | None) -> str:
    """Node 0's address as written; an ``~/.ssh/config`` alias is resolved by the SSH backend."""
    return LOCAL_MASTER_ADDR if host is None or host.is_local else host.hostname


def _local_python(w: Workload) -> str:
    """On this machine the default ``python3`` is the interpreter fsdp-tui runs under (its venv, with torch),
    as the launch uses it: the plan shows what will run."""
    import sys

    return sys.executable if w.environment.python == "python3" else w.environment.python


def _argv(w: Workload, topo: Topology, rank: int, master_addr: str, port: int,
          env_names: list[str], python: str | None = None) -> tuple[str, ...]:
    if w.command is not None and w.environment.docker_image is not None:
        return ("bash", "-c", container_script(w, [*env_names, METRICS_FILE_ENV], gpus=topo.kind == "gpu"))
    if w.command is not None:
        return ("bash", "-c", w.command)
    return (
        python or w.environment.python, "-m", "torch.distributed.run",
        f"--nnodes={topo.num_nodes}",
        f"--node_rank={rank}",
        f"--nproc_per_node={topo.procs_per_node}",
        f"--master_addr={master_addr}",
        f"--master_port={port}",
        "-m", "trainer", DIR_ENV["HYPERPARAMETERS_PATH"],
    )
