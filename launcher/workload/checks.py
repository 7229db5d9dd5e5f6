"""Rules that span fields of a workload, run once its shape is valid."""

from __future__ import annotations

import re
from pathlib import Path as FsPath

from packaging.requirements import InvalidRequirement, Requirement

from launcher.words import plural
from launcher.workload.air_rules import check_air
from launcher.workload.data_check import check_data
from launcher.workload.lora_checks import lora_findings
from launcher.workload.model import ENV_NAME, RESERVED_ENV, SECRET_REF, Workload
from launcher.workload.recovery_checks import recovery_findings
from launcher.workload.topology import Finding, resolve_topology
from trainer.wire.config import TrainerConfig
from trainer.wire.model_family import packing_refusal, read_config, text_config

_SECRETISH = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|API_KEY|ACCESS_KEY|PRIVATE_KEY)", re.IGNORECASE)
_METRIC_GROUPS = {"step", "max_steps", "loss", "lr", "eval_loss", "tokens_per_s", "grad_norm", "epoch"}


def check_workload(w: Workload, base_dir: FsPath | None, written: frozenset[str] | None = None,
                   source: FsPath | None = None) -> list[Finding]:
    """Every cross-field problem of a shape-valid workload. ``base_dir`` is the file's folder, ``source``
    the file; ``written`` the top-level keys of the file (some may have been left out of ``w`` for their
    own errors)."""
    topo = resolve_topology(w)
    out = list(topo.findings)
    out += _env_and_secrets(w)
    out += _environment(w)
    out += _misc(w, base_dir, topo.num_nodes, written)
    out += check_air(w, base_dir, source)
    out += recovery_findings(w, topo.num_nodes)
    return out


def check_trainer(w: Workload, cfg: TrainerConfig, base_dir: FsPath | None = None) -> list[Finding]:
    """Trainer settings that make no sense for this compute or this model."""
    topo = resolve_topology(w)
    out: list[Finding] = []
    p = ("parameters",)
    model_config = read_config(cfg.model_name, base_dir) if cfg.data.packing or cfg.model.router_aux_loss else None
    if cfg.data.packing:
        refusal = packing_refusal(model_config, cfg.model_name)
        if refusal is None and cfg.model.attention == "flex" and topo.kind == "cpu":
            refusal = "flex attention has no backward pass on CPU"
        if refusal is not None:
            out.append(Finding((*p, "data", "packing"), "error", refusal,
                               "set data.packing: false, or leave it out to pack only where it is correct"))
    no_router = model_config is not None and "output_router_logits" not in text_config(model_config)
    if cfg.model.router_aux_loss and no_router:
        out.append(Finding((*p, "model", "router_aux_loss"), "error",
                           "this model has no mixture-of-experts router (its config has no output_router_logits)",
                           "remove model.router_aux_loss"))
    if cfg.fsdp.sharding == "hybrid_shard" and topo.num_nodes == 1 and cfg.fsdp.replicate_degree is None:
        out.append(Finding((*p, "fsdp", "sharding"), "warning",
                           "hybrid_shard on one node shards like full_shard",
                           "set fsdp.replicate_degree, or use full_shard"))
    if cfg.fsdp.replicate_degree and topo.world_size % cfg.fsdp.replicate_degree:
        out.append(Finding((*p, "fsdp", "replicate_degree"), "error",
                           f"{plural(topo.world_size, 'process')} cannot form {cfg.fsdp.replicate_degree} equal replicas",
                           "pick a divisor of the world size"))
    if topo.kind == "cpu" and cfg.fsdp.mixed_precision == "bf16":
        out.append(Finding((*p, "fsdp", "mixed_precision"), "warning",
                           "bf16 mixed precision on CPU is slow and inexact", "use auto (fp32 on CPU)"))
    if cfg.model.compile is True and topo.kind == "cpu":
        out.append(Finding((*p, "model", "compile"), "warning",
                           "torch.compile on CPU needs a C++ compiler on every node and compiles slowly"))
    out += check_data(w, cfg, base_dir, topo.is_local or (not topo.slurm and all(h.is_local for h in topo.hosts)))
    return out + lora_findings(cfg, topo.kind, base_dir)


def _env_and_secrets(w: Workload) -> list[Finding]:
    out: list[Finding] = []
    for name, value in w.env_variables.items():
        path = ("env_variables", name)
        if not ENV_NAME.match(name):
            out.append(Finding(path, "error", f"'{name}' is not a valid environment variable name",
                               "letters, digits and '_', not starting with a digit"))
        elif name in RESERVED_ENV:
            out.append(Finding(path, "error", f"{name} is set by fsdp-tui on every node",
                               "remove it; use compute.master_addr / master_port for the rendezvous"))
        if "\x00" in value:
            out.append(Finding(path, "error", "the value contains a NUL byte"))
        elif _SECRETISH.search(name) and value:
            out.append(Finding(path, "warning", f"{name} looks like a secret written in the file",
                               f"move it to secrets: {name}: scope/key"))
    for name, ref in w.secrets.items():
        path = ("secrets", name)
        if not ENV_NAME.match(name):
            out.append(Finding(path, "error", f"'{name}' is not a valid environment variable name"))
        elif name in RESERVED_ENV:
            out.append(Finding(path, "error", f"{name} is set by fsdp-tui on every node"))
        if name in w.env_variables:
            out.append(Finding(path, "error", f"{name} is in both env_variables and secrets",
                               "keep it in secrets only"))
        if not SECRET_REF.match(ref):
            out.append(Finding(path, "error", f"'{ref}' is not a secret reference",
                               "write scope/key, e.g. my_scope/hf_token"))
    return out


def _environment(w: Workload) -> list[Finding]:
    out: list[Finding] = []
    python = w.environment.python
    if not python.strip() or any(ch.isspace() for ch in python):
        out.append(Finding(("environment", "python"), "error",
                           "environment.python must be one interpreter path or name",
                           "e.g. python3 or /opt/venv/bin/python"))
    deps = w.environment.dependencies
    for i, req in enumerate(deps if isinstance(deps, list) else ()):
        try:
            Requirement(req)
        except InvalidRequirement as err:
            out.append(Finding(("environment", "dependencies", i), "error",
                               f"not a pip requirement: {str(err).splitlines()[0]}", "e.g. transformers>=4.45"))
    return out


def _misc(w: Workload, base_dir: FsPath | None, num_nodes: int, written: frozenset[str] | None) -> list[Finding]:
    out: list[Finding] = []
    if w.command is not None and not w.command.strip():
        out.append(Finding(("command",), "error", "command is empty",
                           "remove it to run the built-in trainer"))
    try:
        pattern = re.compile(w.metrics.pattern)
    except re.error as err:
        out.append(Finding(("metrics", "pattern"), "error", f"not a valid regex: {err}"))
    else:
        if "step" not in pattern.groupindex:
            out.append(Finding(("metrics", "pattern"), "error", "the pattern needs a (?P<step>...) group"))
        unknown = set(pattern.groupindex) - _METRIC_GROUPS
        if unknown:
            out.append(Finding(("metrics", "pattern"), "warning",
                               f"groups {sorted(unknown)} are not metrics and are ignored",
                               f"use {sorted(_METRIC_GROUPS)}"))
    if w.code_source is not None and base_dir is not None:
        root = (base_dir / w.code_source.snapshot.root_path).expanduser()
        if not root.is_dir():
            out.append(Finding(("code_source", "snapshot", "root_path"), "error",
                               f"folder '{root}' does not exist", "paths are relative to the workload file"))
        elif w.code_source.snapshot.git is None:  # a commit's tree is checked when it is exported
            include = w.code_source.snapshot.include_paths or []
            out += [Finding(("code_source", "snapshot", "include_paths", i), "error", f"'{p}' is not in {root}")
                    for i, p in enumerate(include) if p.strip() and not (root / p.strip().strip("/")).exists()]
            out += _snapshot(root, w.code_source.snapshot.exclude, include)
    if w.command is not None and w.code_source is None and "CODE_SOURCE_PATH" in w.command \
            and "code_source" not in (written or ()):
        out.append(Finding(("command",), "warning", "command uses $CODE_SOURCE_PATH but there is no code_source",
                           "add code_source: {type: snapshot, snapshot: {root_path: .}}"))
    if w.ssh != type(w.ssh)() and w.compute.slurm is not None and w.compute.slurm.login == "local":
        out.append(Finding(("ssh",), "warning", "ssh settings are unused: compute.slurm.login is local (they "
                           "govern the link to a login node)"))
    elif w.ssh != type(w.ssh)() and not w.compute.hosts and w.compute.slurm is None:
        out.append(Finding(("ssh",), "warning", "ssh settings are unused: there are no compute.hosts"))
    if num_nodes > 1 and w.compute.hosts and all(h == "localhost" for h in w.compute.hosts):
        out.append(Finding(("compute", "hosts"), "warning", "every node is localhost (no SSH): "
                           "the nodes share this machine"))
    return out


def _snapshot(root: FsPath, exclude: list[str], include: list[str] | tuple[str, ...] = ()) -> list[Finding]:
    """What a node would refuse of the snapshot (found here, before any upload), and its size."""
    from launcher.workload import snapshot

    where = ("code_source", "snapshot", "root_path")
    found = snapshot.scan(root, exclude, include=include)
    out = [Finding(where, "error", f"{r.rel}: a node refuses {r.what}", r.fix) for r in found.refused[:snapshot.SHOWN]]
    if len(found.refused) > snapshot.SHOWN:
        out.append(Finding(where, "error", f"and {len(found.refused) - snapshot.SHOWN} more entries a node refuses",
                           "fsdp-tui validate lists the first ones: fix them and validate again"))
    if found.total_bytes > snapshot.LARGE_SNAPSHOT_BYTES:
        biggest = ", ".join(f"{rel} ({size / 2**20:.0f} MiB)" for rel, size in found.largest)
        out.append(Finding(where, "warning", f"the snapshot is {found.total_bytes / 2**20:.0f} MiB in "
                           f"{plural(found.files, 'file')}, shipped to every node on every launch; the largest: {biggest}",
                           "add data, checkpoints and outputs to code_source.snapshot.exclude"))
    if not found.complete:
        out.append(Finding(where, "warning", f"more than {plural(snapshot.MAX_SCAN_ENTRIES, 'entry')}: only those were "
                           "checked here (a launch checks all of them)", "exclude what the job does not need"))
    return out
