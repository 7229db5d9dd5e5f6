"""``sharding: auto``: what it picks and how the model is wrapped, per device (a GPU's memory is mocked:
no GPU here)."""

from types import SimpleNamespace

import pytest
import torch

from trainer.config import FsdpConfig
from trainer.parallel import Dist, choose_sharding

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


def test_a_named_strategy_is_wrapped_per_block():
    d = Dist(rank=0, world=2, local_rank=0, local_world=2, device=torch.device("cpu"))
    chosen = choose_sharding(FsdpConfig(sharding="no_shard"), 1000, d)
    assert chosen.sharding == "no_shard" and chosen.per_block
