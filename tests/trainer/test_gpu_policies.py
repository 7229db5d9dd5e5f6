"""What the trainer decides from a GPU's properties: ``sharding: auto`` and how the model is wrapped, the
memory a gauge shows. The GPU is mocked (torch.cuda's queries answer fixed numbers): no GPU here."""

from types import SimpleNamespace

import pytest
import torch

from trainer.loop.metrics import rank_memory
from trainer.parallel import Dist, choose_sharding
from trainer.wire.config import FsdpConfig, TrainerConfig
from trainer.wire.fit_advice import setup_for
from trainer.wire.model_size import builtin_config, size_of
from trainer.wire.protocol import RankMemory

GIB = 2**30


def _llama(hidden: int, layers: int) -> dict:
    return {"model_type": "llama", "vocab_size": 128256, "hidden_size": hidden, "intermediate_size": int(hidden * 3.5),
            "num_hidden_layers": layers, "num_attention_heads": hidden // 128, "num_key_value_heads": 8}


@pytest.mark.parametrize(("device", "world", "config", "sharding", "per_block"), [
    ("cuda", 8, _llama(2048, 16), "no_shard", True),  # 1.2B fits an 80 GB card whole: replicated, wrapped per block
    ("cuda", 8, _llama(4096, 32), "full_shard", True),  # 8B: 128 GB of training state, sharded
    ("cuda", 1, _llama(4096, 32), "no_shard", True),
    ("cpu", 2, builtin_config("builtin:tiny-llama"), "no_shard", False),  # plain replication on CPU
    ("cpu", 1, builtin_config("builtin:tiny-llama"), "no_shard", False),
])
def test_auto_sharding_wraps_blocks_on_every_gpu_choice(monkeypatch, device, world, config, sharding, per_block):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _d: SimpleNamespace(total_memory=80 * GIB,
                                                                                           name="NVIDIA H100"))
    d = Dist(rank=0, world=world, local_rank=0, local_world=min(world, 8), device=torch.device(device))
    setup = setup_for(TrainerConfig(model_name="m", dataset_name="d", output_dir="o", max_seq_len=2048),
                      world=world, nodes=1, device=device, sharding="no_shard", packing=True)
    chosen = choose_sharding(FsdpConfig(), d, size_of(config), setup)
    assert (chosen.sharding, chosen.per_block) == (sharding, per_block)
    assert chosen.note.startswith(f"sharding: {sharding} (auto: whole on each rank it needs ~")


def test_auto_weighs_what_the_run_holds_beyond_its_weights(monkeypatch):
    """A 1.2B model's weights, gradients and Adam state (19 GB) fit an 80 GB card whole; at 16 rows of
    8k tokens its activations do not: auto shards it."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _d: SimpleNamespace(total_memory=80 * GIB,
                                                                                           name="NVIDIA H100"))
    d = Dist(rank=0, world=8, local_rank=0, local_world=8, device=torch.device("cuda"))
    big = TrainerConfig(model_name="m", dataset_name="d", output_dir="o", max_seq_len=8192, per_device_batch_size=16)
    setup = setup_for(big, world=8, nodes=1, device="cuda", sharding="no_shard", packing=True)
    assert choose_sharding(FsdpConfig(), d, size_of(_llama(2048, 16)), setup).sharding == "full_shard"


@pytest.mark.parametrize(("device", "sharding", "per_block"), [
    ("cpu", "no_shard", False),  # named or chosen, a replicated model on CPU is plain replication
    ("cuda", "no_shard", True),
    ("cpu", "full_shard", True),
    ("cpu", "shard_grad_op", True),
    ("cuda", "hybrid_shard", True),
])
def test_a_named_strategy_is_wrapped_per_block_except_replication_on_cpu(device, sharding, per_block):
    d = Dist(rank=0, world=2, local_rank=0, local_world=2, device=torch.device(device))
    chosen = choose_sharding(FsdpConfig(sharding=sharding), d)
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
