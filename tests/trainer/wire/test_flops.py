"""Training FLOPs as MFU counts them (``trainer.wire.flops``): a full fine-tune and a LoRA run of one small
Llama against a count by hand from its shapes, the model's own parameters read by ``ModelShape.of``, and
torch's FLOP counter over a real forward and backward (the base frozen: no weight-gradient matmuls)."""

from __future__ import annotations

import pytest
import torch

from trainer.loop import metrics
from trainer.wire import flops

H, MLP, L, HEADS, KV, V, R = 64, 192, 4, 4, 2, 320, 8
"""hidden, MLP width, layers, query heads, key/value heads, vocabulary, LoRA rank."""
D = H // HEADS


def _by_hand() -> tuple[int, int]:
    """Non-embedding parameters and LoRA's trained ones (rank 8 on q_proj and v_proj), from the shapes."""
    attention = H * HEADS * D + 2 * H * KV * D + HEADS * D * H          # q, k, v, o (no biases)
    mlp = 3 * H * MLP                                                     # gate, up, down
    per_layer = attention + mlp + 2 * H                                 # two RMSNorms
    adapters = R * (H + HEADS * D) + R * (H + KV * D)                   # lora_A + lora_B on q and v
    base = L * per_layer + H + V * H                                    # final norm, untied output layer
    return base + L * adapters, L * adapters


def _model(lora: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=MLP, num_hidden_layers=L,
                         num_attention_heads=HEADS, num_key_value_heads=KV, tie_word_embeddings=False,
                         attn_implementation="eager")
    model = LlamaForCausalLM(config)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=R, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    return model


def test_lora_flops_are_what_a_frozen_base_does_by_hand():
    non_embedding, trained = _by_hand()
    lengths = [100, 28]
    attention = 12 * L * HEADS * D * (100 ** 2 + 28 ** 2)
    full_base = non_embedding - L * (R * (H + HEADS * D) + R * (H + KV * D))
    assert flops.train_flops(full_base, None, L, HEADS * D, lengths) == 6 * full_base * 128 + attention
    lora = flops.train_flops(non_embedding, trained, L, HEADS * D, lengths)
    assert lora == (4 * non_embedding + 2 * trained) * 128 + attention
    # NeMo Automodel's (2 + trainable/total)/3 of 6ND: the same figure
    assert lora - attention == pytest.approx((2 + trained / non_embedding) / 3 * 6 * non_embedding * 128)
    assert 1.45 < 6 * non_embedding / flops.dense_flops_per_token(non_embedding, trained) < 1.5  # ~1.5x lower


def test_the_model_s_shape_counts_what_trains():
    non_embedding, trained = _by_hand()
    full = metrics.ModelShape.of(_model(lora=False))
    assert full.non_embedding_params == non_embedding - trained and full.trainable_non_embedding is None
    adapted = metrics.ModelShape.of(_model(lora=True))
    assert adapted.non_embedding_params == non_embedding and adapted.trainable_non_embedding == trained
    assert adapted.attention_width == HEADS * D and adapted.num_layers == L
    note = metrics.mfu_note(adapted, 989e12)
    assert "model FLOPs" in note and "989 TFLOP/s" in note and "(2 + trained share)/3" in note
    assert "logging.peak_tflops" in metrics.mfu_note(full, None)


def test_a_4bit_base_is_counted_by_its_layers_not_its_packed_storage():
    """QLoRA: bitsandbytes stores each base linear weight packed, four 4-bit values in one bf16 element
    (``bnb_4bit_quant_storage: bf16``), a parameter of a quarter of the layer's count, and quantizes on
    CUDA only; here a LoRA model's base weights are replaced by such storage, laid out as bitsandbytes
    lays it. The FLOPs count the layers' weights, as the matmuls do, not the storage's elements."""
    non_embedding, trained = _by_hand()
    model = _model(lora=True)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and ".lora_" not in name and not name.endswith("lm_head"):
            packed = torch.zeros(module.weight.numel() // 4, 1, dtype=torch.bfloat16)
            module.weight = torch.nn.Parameter(packed, requires_grad=False)
    shape = metrics.ModelShape.of(model)
    assert (shape.non_embedding_params, shape.trainable_non_embedding) == (non_embedding, trained)
    assert sum(p.numel() for p in model.parameters()) < shape.num_params  # the storage alone would undercount


@pytest.mark.parametrize("lora", [False, True])
def test_torch_s_flop_counter_agrees_with_the_count(lora):
    """One forward and backward of one 64-token row, counted by torch (matmuls and attention's bmm):
    within 4% of the convention's figure (torch skips the first layer's input gradients, which nothing
    trains below; the convention counts them)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = _model(lora)
    ids = torch.randint(0, V, (1, 64))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    counted = counter.get_total_flops()
    expected = metrics.train_flops(metrics.ModelShape.of(model), [64])
    assert counted == pytest.approx(expected, rel=0.04)
    if lora:  # against the 6ND a LoRA run was counted with before: about 1.5x too high
        shape = metrics.ModelShape.of(model)
        old = 6 * shape.non_embedding_params * 64 + 12 * L * HEADS * D * 64 ** 2
        assert old / counted > 1.3
