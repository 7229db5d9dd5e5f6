"""A dry run as a value: what each node will run (host, rank, directory, environment, command) and, for a
SLURM run, what is submitted where. Only the file and command text is text here (a shell's assignments and
command lines, the batch script); ``launcher.present.dry_run`` words the rest. Reads the code snapshot's
folder for its size; touches no host."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.paths import shell_path

if TYPE_CHECKING:
    from launcher.workload.ckpt_place import CheckpointPlace
    from launcher.workload.plan import RunPlan


@dataclass(frozen=True)
class SnapshotSize:
    """What the code snapshot's folder holds, as a launch would tar it."""

    files: int
    total_bytes: int
    refused: int
    """Entries a node refuses (a link out of the folder, a FIFO...): a launch names each."""


@dataclass(frozen=True)
class CodeShipped:
    """The code snapshot every node gets in ``<node dir>/code``."""

    root: str
    """The folder on this machine."""
    commit: str | None = None
    branch: str | None = None
    git: bool = False
    """As committed (at ``commit``, else at ``branch``), not as it is on disk."""
    remote: str | bool = False
    """From the clone's remote: ``True`` its own, a name, or ``False`` (the local clone)."""
    only: tuple[str, ...] = ()
    """``include_paths``: only these ship (empty: the whole folder)."""
    size: SnapshotSize | None = None
    """Counted on disk; ``None`` when it ships as committed or the folder is not there."""


@dataclass(frozen=True)
class NodeDryRun:
    """One node as it will start."""

    rank: int
    host: str
    """How the node is named (``this machine``, ``user@host:port``, a SLURM node)."""
    directory: str
    """Its run directory as a shell takes it pasted (a leading ``~/`` outside the quotes)."""
    environment: tuple[tuple[str, str], ...]
    """Each variable and its value as a shell takes it (quoted), sorted by name; secrets are not here."""
    iface_env: tuple[str, ...] = ()
    """Variables the node sets to its interface that reaches ``MASTER_ADDR``, found there."""
    rank_tag_env: str | None = None
    """The variable the node's agent sets to each line's rank tag; ``None``: the workload sets it."""
    command: tuple[str, ...] = ()
    """The command as a shell takes it, line by line (a ``bash -c`` script's lines, else one joined argv)."""


@dataclass(frozen=True)
class SlurmDryRun:
    """What a SLURM run submits, and where."""

    login: str | None
    """The login node ``sbatch`` runs on; ``None``: this machine."""
    run_dir: str
    """The run's directory on the shared filesystem, where ``sbatch`` runs."""
    script_file: str
    """The batch script of the first attempt, relative to ``run_dir``."""
    agent_file: str
    """The node task's zip, relative to ``run_dir``."""
    port_per_job: bool
    """Each job picks its own rendezvous port (``compute.master_port`` is unset)."""
    script: str
    """The batch script's text, as it is written."""


@dataclass(frozen=True)
class DryRun:
    """What ``fsdp-tui run --dry-run`` shows of a plan, as the backend that will run it sees it."""

    run_id: str
    experiment: str
    num_nodes: int
    procs_per_node: int
    kind: str
    """``gpu`` or ``cpu``."""
    gpu_model: str | None
    world_size: int
    master_addr: str
    master_port: int | str
    """The plan's rendezvous port; a SLURM job without ``compute.master_port`` picks its own, shown as it
    computes it (here, in its nodes' environment and command alike)."""
    builtin_trainer: bool
    code: CodeShipped | None
    dependencies: tuple[str, ...]
    blockers: tuple[str, ...]
    """Why the plan cannot run as it stands, in the core's words."""
    checkpoints: CheckpointPlace | None
    """Where ``output_dir`` lands on the nodes, when they were asked."""
    secrets: tuple[tuple[str, str], ...]
    """Each secret's variable and the secret it names (its value is never here)."""
    nodes: tuple[NodeDryRun, ...]
    slurm: SlurmDryRun | None = None


def dry_run_of(plan: RunPlan) -> DryRun:
    """``plan`` as its dry run: per node its host, rank, directory, full environment, command."""
    from launcher.workload.plan import RANK_TAG_ENV

    topo = plan.topology
    nodes = []
    for node in plan.nodes:
        paths = {k: f"{node.node_dir}/{v}" for k, v in node.dir_env.items()}
        env = {**node.env, **paths}
        shown = tuple((name, shell_path(env[name]) if name in paths else shlex.quote(env[name])) for name in sorted(env))
        command = (tuple(node.argv[2].rstrip("\n").splitlines()) if node.argv[:2] == ("bash", "-c")
                   else (shlex.join(node.argv),))
        nodes.append(NodeDryRun(rank=node.node_rank, host=node.host_display, directory=shell_path(node.node_dir),
                                environment=shown, iface_env=node.iface_env,
                                rank_tag_env=RANK_TAG_ENV if node.rank_tag else None, command=command))
    return DryRun(
        run_id=plan.run_id, experiment=plan.workload.experiment_name, num_nodes=topo.num_nodes,
        procs_per_node=topo.procs_per_node, kind=topo.kind, gpu_model=topo.gpu_model or None,
        world_size=topo.world_size, master_addr=plan.master_addr, master_port=plan.master_port,
        builtin_trainer=plan.uses_builtin_trainer, code=_code_shipped(plan), dependencies=tuple(plan.dependencies),
        blockers=tuple(plan.blockers), checkpoints=plan.ckpt_place,
        secrets=tuple((name, plan.workload.secrets[name]) for name in plan.secret_names), nodes=tuple(nodes))


def _code_shipped(plan: RunPlan) -> CodeShipped | None:
    if plan.code_root is None:
        return None
    snap = plan.workload.code_source.snapshot if plan.workload.code_source else None
    git = snap.git if snap is not None else None
    only = tuple(snap.include_paths) if snap is not None and snap.include_paths else ()
    if git is None:
        return CodeShipped(root=str(plan.code_root), only=only, size=_snapshot_size(plan))
    remote = git.remote if git.remote not in ("", None) else False
    return CodeShipped(root=str(plan.code_root), commit=git.commit or None, branch=git.branch, git=True,
                       remote=remote, only=only)


def _snapshot_size(plan: RunPlan) -> SnapshotSize | None:
    from launcher.workload.snapshot import scan

    root, source = plan.code_root, plan.workload.code_source
    if root is None or source is None or not root.is_dir():
        return None
    snap = source.snapshot
    found = scan(root, snap.exclude, include=snap.include_paths or ())
    return SnapshotSize(files=found.files, total_bytes=found.total_bytes, refused=len(found.refused))
