"""Will the workload fit, said before anything starts: each rank's predicted peak memory
(:mod:`trainer.wire.fit`, the rule the trainer applies too) from the model's ``config.json`` alone (a local
folder or the Hugging Face cache; a ``builtin:`` model by name), against the rank's memory where it is
known here: what the doctor read on the nodes, the card an ``accelerator_type`` names, or this machine's
RAM for a run on this machine. ``run --dry-run``, ``doctor`` and the editor's plan preview say it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from launcher.words import plural
from launcher.workload.accelerators import GPU_MEMORY_GIB, TWO_SIZES
from launcher.workload.plan import RunPlan
from trainer.wire import fit_advice
from trainer.wire.config import TrainerConfig
from trainer.wire.fit import Sharding
from trainer.wire.fit_advice import Budget, Verdict
from trainer.wire.model_family import packing_refusal, read_config
from trainer.wire.model_size import ModelSize, builtin_config, size_of

GIB = 2**30


@dataclass(frozen=True)
class FitPlan:
    """What the prediction of a plan needs, read once: the model's sizes and the trainer's settings."""

    size: ModelSize
    cfg: TrainerConfig
    config: dict[str, Any]


def fit_plan(plan: RunPlan) -> FitPlan | str:
    """The model and settings of ``plan``, or why its memory cannot be predicted here (one line)."""
    if not plan.uses_builtin_trainer:
        return "memory: not predicted (a command of your own: its model is not known here)"
    try:
        cfg = TrainerConfig.model_validate(plan.workload.parameters)
    except ValueError:
        return "memory: not predicted (fix the parameters first)"
    base = plan.source_file.parent if plan.source_file is not None else None
    config = builtin_config(cfg.model_name) or read_config(cfg.model_name, base)
    if config is None:
        return (f"memory: not predicted ({cfg.model_name}'s config.json is not on this machine: "
                f"`huggingface-cli download {cfg.model_name} config.json` puts it in the cache)")
    size = size_of(config)
    if size is None:
        return f"memory: not predicted ({cfg.model_name}'s config.json has no decoder sizes this can count)"
    return FitPlan(size, cfg, config)


def known_budget(plan: RunPlan) -> Budget | None:
    """A rank's memory as known without asking a node: the card ``accelerator_type`` names, or this
    machine's RAM over its processes for a run on this machine; ``None`` otherwise."""
    topo = plan.topology
    if topo.kind == "gpu":
        gib = GPU_MEMORY_GIB.get(topo.gpu_model or "")
        if gib is None:
            return None
        assumed = "; assumed, it comes in two sizes" if topo.gpu_model in TWO_SIZES else ""
        return Budget(int(gib * GIB), f"{topo.gpu_model}, from compute.accelerator_type{assumed}")
    if topo.is_local:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return Budget(ram // max(1, topo.procs_per_node), f"this machine's RAM over {plural(topo.procs_per_node, 'process')}")
    return None


def verdict_of(fit: FitPlan, plan: RunPlan, budget: Budget | None) -> Verdict:
    """The prediction for ``plan`` on ranks of ``budget`` (``auto`` sharding chosen as the trainer will)."""
    cfg, topo = fit.cfg, plan.topology
    device = "cuda" if topo.kind == "gpu" else "cpu"
    packing = cfg.data.packing if cfg.data.packing is not None else packing_refusal(fit.config, cfg.model_name) is None
    attention = "eager" if cfg.model.attention == "eager" else "flex" if cfg.model.attention == "flex" else "sdpa"

    def setup(sharding: Sharding):
        return fit_advice.setup_for(cfg, world=topo.world_size, nodes=topo.num_nodes, device=device,
                                    sharding=sharding, packing=packing, attention=attention, vocab=fit.size.vocab)

    sharding: Sharding
    if cfg.fsdp.sharding != "auto":
        sharding = cfg.fsdp.sharding
    elif budget is None:
        sharding = "no_shard" if topo.world_size == 1 else "full_shard"
    else:
        sharding = fit_advice.choose_auto(fit.size, setup("no_shard"), budget.bytes)
    return fit_advice.verdict(fit.size, setup(sharding), budget, lora_possible=not cfg.model.from_scratch)


@dataclass(frozen=True)
class PlanFit:
    """What is known of a plan's memory before it starts (a dry run's and the editor's, said by
    :mod:`launcher.present.plan_preview`): the prediction against a rank's memory, or why there is none."""

    verdict: Verdict | None
    """Each rank's predicted need against its memory where known; ``None``: not predicted."""
    auto: bool = False
    """``fsdp.sharding: auto`` chose the sharding the verdict predicts."""
    unknown: str = ""
    """Why nothing is predicted, in one line (``memory: not predicted (...)``, as the doctor says it too);
    empty with a verdict."""


def plan_fit(plan: RunPlan, budget: Budget | None = None) -> PlanFit:
    """The prediction of ``plan``'s memory (``budget``: a rank's memory as the doctor read it; else what is
    known here)."""
    fit = fit_plan(plan)
    if isinstance(fit, str):
        return PlanFit(None, unknown=fit)
    return PlanFit(verdict_of(fit, plan, budget or known_budget(plan)), auto=fit.cfg.fsdp.sharding == "auto")
