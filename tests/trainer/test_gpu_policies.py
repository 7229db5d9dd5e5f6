"""What the trainer decides from a GPU's properties: ``sharding: auto`` and how the model is wrapped, the
memory a gauge shows. The GPU is mocked (torch.cuda's queries answer fixed numbers): no GPU here."""

from types import SimpleNamespace

import pytest
import torch

from trainer.loop.metrics import rank_memory
from trainer.parallel import Dist, choose_sharding
from trainer.wire.config import FsdpConfig
from trainer.wire.protocol import RankMemory

GIB = 2**30


@pytest.mark.parametrize(("device", "world", "params", "sharding", "per_block"), [
    ("cuda", 8, 1_200_000_000, "no_shard", True),  # fits an 80 GB card: replicated, still wrapped per block
    ("cuda", 8, 8_000_000_000, "full_shard", True),
    ("cuda", 1, 8_000_000_000, "no_shard", True),
    ("cpu", 2, 1_000_000, "no_shard", False),  # plain replication on CPU
    ("cpu", 1, 1_000_000, "no_shard", False),
])
def test_auto_sharding_wraps_blocks_on_every_gpu_choice(monkeypatch, device, world, params, sharding, per_block):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _d: SimpleNamespace(total_memory=80 * GIB))
    d = Dist(rank=0, world=world, local_rank=0, local_world=min(world, 8), device=torch.device(device))
    chosen = choose_sharding(FsdpConfig(), params, d)
    assert (chosen.sharding, chosen.per_block) == (sharding, per_block)
    assert chosen.note.startswith(f"sharding: {sharding} (auto: ")


@pytest.mark.parametrize(("device", "sharding", "per_block"), [
    ("cpu", "no_shard", False),  # named or chosen, a replicated model on CPU is plain replication
    ("cuda", "no_shard", True),
    ("cpu", "full_shard", True),
    ("cpu", "shard_grad_op", True),
    ("cuda", "hybrid_shard", True),
])
def test_a_named_strategy_is_wrapped_per_block_except_replication_on_cpu(device, sharding, per_block):
    d = Dist(rank=0, world=2, local_rank=0, local_world=2, device=torch.device(device))
    chosen = choose_sharding(FsdpConfig(sharding=sharding), 1000, d)
    assert (chosen.sharding, chosen.per_block, chosen.note) == (sharding, per_block, f"sharding: {sharding}")


def test_the_gauge_reads_the_cards_used_memory_not_the_tensors_peak(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda _d: (50 * GIB, 80 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda _d: 12 * GIB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda _d: 20 * GIB)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda _d: 18 * GIB)
    d = Dist(rank=3, world=8, local_rank=3, local_world=8, device=torch.device("cuda", 3))
    mem = RankMemory(**rank_memory(d))
    assert (mem.device_used_gib, mem.total_gib, mem.peak_gib, mem.reserved_gib) == (30.0, 80.0, 18.0, 20.0)
    assert mem.used_gib == 30.0  # context, NCCL buffers and other processes count: they run out too


@pytest.mark.parametrize(("name", "tflops"), [
    ("NVIDIA H100 80GB HBM3", 989.0),
    ("NVIDIA H100 PCIe", 756.0),
    ("NVIDIA H200", 989.0),
    ("NVIDIA H200 NVL", 835.0),
    ("NVIDIA GH200 480GB", 989.0),
    ("NVIDIA L40", 181.0),
    ("NVIDIA L40S", 362.0),
    ("NVIDIA L4", 121.0),
    ("NVIDIA A10G", 70.0),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA H20", 148.0),
    ("NVIDIA H800", 989.0),
    ("NVIDIA A800-SXM4-80GB", 312.0),
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 989.0 * 3 / 7),
    ("Tesla T4", None),
])
def test_peak_flops_match_whole_model_names_and_mig_slices(name, tflops):
    from trainer.loop.metrics import peak_of

    assert peak_of(name) == (None if tflops is None else pytest.approx(tflops * 1e12))
