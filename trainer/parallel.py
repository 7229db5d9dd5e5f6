"""Process group, device, and FSDP2 sharding: ``fully_shard`` per decoder block, then the root."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from torch import nn

try:
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from trainer import flight
from trainer.model.build import decoder_blocks
from trainer.wire import fit_advice
from trainer.wire.config import FsdpConfig
from trainer.wire.fit import Setup, predict
from trainer.wire.model_size import ModelSize


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int
    local_world: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def num_nodes(self) -> int:
        return max(1, self.world // self.local_world)


def init_distributed() -> Dist:
    """gloo on CPU; on GPU, NCCL for CUDA tensors and gloo for the few CPU scalars the loop reduces
    (token counts, loss sums). Works as a single process too (world size 1)."""
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
        # fp32 matmuls (mixed_precision: fp32, fp32 parts of bf16 runs) on tensor cores, as TF32
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29533"))
        dist.init_process_group(backend="cpu:gloo,cuda:nccl" if cuda else "gloo")
    flight.start(dist.get_rank())  # the collectives each rank is in, dumped when a stalled run is looked at
    device = torch.device(f"cuda:{local_rank}") if cuda else torch.device("cpu")
    return Dist(dist.get_rank(), dist.get_world_size(), local_rank,
                int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size())), device)


@dataclass(frozen=True)
class Sharding:
    sharding: str
    note: str
    """The line that says what was chosen and why."""
    per_block: bool = True
    """Wrap each decoder block: gradients reduced block by block, overlapping backward, and on a GPU the
    bf16 copy of a block gathered only while it runs. Only a replicated model on CPU is wrapped at the
    root (plain replication: there the collectives, not compute, are the step's cost)."""


def choose_sharding(cfg: FsdpConfig, d: Dist, size: ModelSize | None = None, setup: Setup | None = None,
                    process_bytes: int | None = None) -> Sharding:
    """``auto``: replicate the model (``no_shard``) when a rank holding it whole fits its memory, by the
    memory prediction (:func:`trainer.wire.fit_advice.choose_auto`: ``size`` and ``setup`` are the
    run's), else shard it; a model the prediction cannot size is sharded."""
    if cfg.sharding != "auto":
        # A replicated model on CPU is plain replication, whether named or chosen (see ``per_block``).
        return Sharding(cfg.sharding, f"sharding: {cfg.sharding}",
                        per_block=cfg.sharding != "no_shard" or d.device.type == "cuda")
    room = rank_budget(d)
    if size is None or setup is None:
        choice = "no_shard" if d.world == 1 else "full_shard"
        why = "the memory prediction cannot size this model"
    else:
        choice = fit_advice.choose_auto(size, setup, room.bytes, process_bytes)
        whole = fit_advice.need_bytes(predict(size, replace(setup, sharding="no_shard")), process_bytes)
        why = f"whole on each rank it needs ~{whole / 2**30:.2f} GiB of {room.bytes / 2**30:.0f} GiB"
    return Sharding(choice, f"sharding: {choice} (auto: {why}; set fsdp.sharding to override)",
                    per_block=choice != "no_shard" or d.device.type == "cuda")


def rank_budget(d: Dist) -> fit_advice.Budget:
    """A rank's memory: its GPU's, else the node's RAM over the node's ranks."""
    if d.device.type == "cuda":
        props = torch.cuda.get_device_properties(d.device)
        return fit_advice.Budget(props.total_memory, getattr(props, "name", "the GPU"))
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return fit_advice.Budget(ram // max(1, d.local_world), f"this node's RAM over {d.local_world} ranks")


def param_device(cfg: FsdpConfig, d: Dist) -> torch.device:
    """Where sharded parameters live: the host with CPU offload, else the rank's device."""
    return torch.device("cpu") if cfg.cpu_offload else d.device


def shard_model(model: nn.Module, cfg: FsdpConfig, d: Dist, per_block: bool = True) -> nn.Module:
    """Apply FSDP2. The mesh is 1-D (shard over all ranks) or 2-D (replicate x shard) for HSDP/no_shard."""
    from torch.distributed.device_mesh import init_device_mesh

    kind = d.device.type
    if not per_block and kind == "cpu" and not _use_bf16(cfg, d) and not cfg.cpu_offload:
        # Plain replication (DDP's bucketed all-reduce during backward, plain tensors): on CPU the
        # per-step cost of a small model is the collectives and DTensor bookkeeping, not compute.
        from torch.distributed._composable.replicate import replicate

        return replicate(model)
    if cfg.sharding == "hybrid_shard":
        replicas = cfg.replicate_degree or d.num_nodes
        mesh = init_device_mesh(kind, (replicas, d.world // replicas), mesh_dim_names=("replicate", "shard"))
    elif cfg.sharding == "no_shard":
        mesh = init_device_mesh(kind, (d.world, 1), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(kind, (d.world,), mesh_dim_names=("shard",))
    kwargs: dict = {"mesh": mesh, "reshard_after_forward": cfg.sharding not in ("shard_grad_op", "no_shard")}
    if _use_bf16(cfg, d):
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16,
            reduce_dtype=torch.float32 if cfg.reduce_dtype == "fp32" else torch.bfloat16,
        )
    if cfg.cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    elif kind == "cuda" and not any(p.is_meta for p in model.parameters()):
        model.to(d.device)
    if per_block:
        for group in block_groups(decoder_blocks(model), _unit_bytes(cfg, d)):
            fully_shard(group if len(group) > 1 else group[0], **kwargs)
    # The root is needed again as soon as backward starts: kept gathered (torch's own default for a root)
    fully_shard(model, **{**kwargs, "reshard_after_forward": False})
    return model


UNIT_BYTES = 25 * 2**20
"""The least an FSDP unit gathers and reduces at once, as DDP's default bucket (``bucket_cap_mb``): blocks
smaller than this are wrapped together. Each unit costs a collective (two with resharding) in forward and
one in backward, whatever its size: for small blocks the step's time is those collectives' latency and
FSDP's bookkeeping, not their bytes (on CPU a 0.1M-parameter model's step was half FSDP's per-block work).
A block this size or larger (every block of a 1B model in bf16) is still its own unit."""


def block_groups(blocks: list[nn.Module], unit_bytes: int) -> list[list[nn.Module]]:
    """Consecutive blocks in groups of at least ``unit_bytes`` of parameters; blocks left after the last
    full group stay out (the root's unit holds them), as does everything when all blocks are smaller."""
    groups: list[list[nn.Module]] = []
    current: list[nn.Module] = []
    size = 0
    for block in blocks:
        current.append(block)
        size += sum(p.numel() * p.element_size() for p in block.parameters())
        if size >= unit_bytes:
            groups.append(current)
            current, size = [], 0
    return groups


def _unit_bytes(cfg: FsdpConfig, d: Dist) -> int:
    """``UNIT_BYTES`` in the parameters' stored dtype (fp32 on a meta-built model); with bf16 compute the
    gather moves half of that, so a unit holds twice the parameters."""
    return UNIT_BYTES * (2 if _use_bf16(cfg, d) else 1)


def _use_bf16(cfg: FsdpConfig, d: Dist) -> bool:
    if cfg.mixed_precision == "bf16":
        return True
    return cfg.mixed_precision == "auto" and d.device.type == "cuda"
