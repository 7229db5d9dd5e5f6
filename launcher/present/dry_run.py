"""A dry run in words (``fsdp-tui run --dry-run``, ``sweep --dry-run``, the editor's Plan tab): the plan's
header, per node its host, rank, directory, full environment (secrets masked) and command; for a SLURM run,
what is submitted where and the batch script."""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.words import plural

if TYPE_CHECKING:
    from launcher.api.runs import CodeShipped, DryRun, NodeDryRun, SlurmDryRun

SECRET_MASK = "******"
IFACE_PLACEHOLDER = "<the interface that reaches MASTER_ADDR, found on the node>"
RANK_TAG_PLACEHOLDER = "<each line's rank, as a tag no terminal shows>"


def dry_run_text(dry: DryRun) -> str:
    """The whole dry run, each line ended."""
    lines = header_lines(dry)
    for node in dry.nodes:
        lines += ["", *node_lines(node, dry.secrets)]
    text = "\n".join(lines) + "\n"
    if dry.slurm is not None:
        text += "\n".join(slurm_lines(dry.slurm, dry)) + "\n"
    return text


def header_lines(dry: DryRun) -> list[str]:
    lines = [
        f"run {dry.run_id}: experiment '{dry.experiment}'",
        f"  {plural(dry.num_nodes, 'node')} x {plural(dry.procs_per_node, 'process')} ({dry.kind}"
        + (f" {dry.gpu_model}" if dry.gpu_model else "") + f"), world size {dry.world_size}",
        f"  rendezvous {dry.master_addr}:{dry.master_port}",
        "  runs: " + ("the built-in trainer (torchrun -m trainer)" if dry.builtin_trainer
                      else "the workload's command"),
    ]
    if dry.code is not None:
        lines.append(f"  code snapshot: {code_words(dry.code)}")
    if dry.dependencies:
        lines.append(f"  dependencies: {' '.join(dry.dependencies)}")
    lines += [f"  cannot run yet: {blocker}" for blocker in dry.blockers]
    if dry.checkpoints is not None:
        lines.append(f"  checkpoints: {dry.checkpoints.words()}")
    return lines


def code_words(code: CodeShipped) -> str:
    """Where the snapshot comes from, what of it ships, and how big it is when counted."""
    revision = ""
    if code.git:
        revision = f" as committed at {'commit ' + code.commit if code.commit else 'branch ' + str(code.branch)}"
        if code.remote is not False:
            where = code.remote if isinstance(code.remote, str) else "its remote"
            revision += f" on {where} (fetched at launch)"
    only = f" (only {', '.join(code.only)})" if code.only else ""
    size = ""
    if code.size is not None:
        refused = f", {plural(code.size.refused, 'entry')} a node refuses" if code.size.refused else ""
        size = f" ({plural(code.size.files, 'file')}, {code.size.total_bytes / 2**20:.1f} MiB{refused})"
    return f"{code.root}{revision}{only} -> <node dir>/code{size}"


def node_lines(node: NodeDryRun, secrets: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """One node: its host and rank, directory, environment (secrets masked, naming their secret), command."""
    lines = [f"node {node.rank}: {node.host}", f"  directory: {node.directory}", "  environment:"]
    lines += [f"    {name}={value}" for name, value in node.environment]
    lines += [f"    {name}={IFACE_PLACEHOLDER}" for name in node.iface_env]
    if node.rank_tag_env:
        lines.append(f"    {node.rank_tag_env}={RANK_TAG_PLACEHOLDER}")
    lines += [f"    {name}={SECRET_MASK}  (secret {secret})" for name, secret in secrets]
    return [*lines, "  command:", *(f"    {line}" for line in node.command)]


def slurm_lines(slurm: SlurmDryRun, dry: DryRun) -> list[str]:
    """What goes where on the cluster, how each node learns its part, and the batch script."""
    login = slurm.login if slurm.login is not None else "this machine (the login node)"
    shipped = ["parameters.yaml"]
    if dry.code is not None:
        shipped.append(f"code/ (snapshot of {dry.code.root})")
    if dry.builtin_trainer:
        shipped.append("pkg/trainer/ (the built-in trainer)")
    return [
        "",
        f"SLURM: submitted through {login} with `sbatch --parsable {slurm.script_file}` in {slurm.run_dir}",
        f"  shipped to every node-<rank>/ there: {', '.join(shipped)}; {slurm.agent_file} (the node task)",
        "  NODE_RANK comes from SLURM_NODEID, MASTER_ADDR is the first host of SLURM_JOB_NODELIST"
        + (", MASTER_PORT is 20000 + job id mod 20000" if slurm.port_per_job else ""),
        "  every node works in node-0/ (one folder on the shared filesystem: a relative output_dir is shared)",
        "  secrets reach the job through sbatch's environment, never this script",
        "",
        f"batch script ({slurm.script_file}):",
        *("  " + line for line in slurm.script.rstrip("\n").splitlines()),
    ]
