"""The share of weights a LoRA run trains, as its start line says it: a QLoRA base counted by its weights,
not by the bf16 elements its 4-bit weights are packed into."""

import torch
from torch import nn

from trainer.lora.adapters import weight_count


class Linear4bit(nn.Linear):
    """Stands in for bitsandbytes' ``Linear4bit`` (it needs CUDA, absent here): the layer keeps its
    in/out features while its weight is stored packed, four 4-bit weights to a bf16 element."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(n_in, n_out, bias=False)
        self.weight = nn.Parameter(torch.zeros(n_in * n_out // 4, 1, dtype=torch.bfloat16), requires_grad=False)


def test_a_packed_4bit_layer_counts_its_weights_by_its_shape():
    model = nn.Sequential(Linear4bit(64, 32), nn.Linear(32, 8))
    stored = sum(p.numel() for p in model.parameters())
    assert stored == 64 * 32 // 4 + 32 * 8 + 8
    assert weight_count(model) == 64 * 32 + 32 * 8 + 8


def test_a_model_without_4bit_layers_counts_what_it_stores():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 3))
    assert weight_count(model) == sum(p.numel() for p in model.parameters())
