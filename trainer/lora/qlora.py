"""QLoRA: the frozen base in 4-bit NF4 through bitsandbytes, sharded by FSDP2, LoRA adapters beside it.

bitsandbytes quantizes on CUDA only, so ``lora.quantize`` is refused at start (one line, every rank) on a
node whose torch has no CUDA or that lacks bitsandbytes; ``fsdp-tui validate`` refuses it already for CPU
workloads. The 4-bit weights are stored in bf16 (``bnb_4bit_quant_storage``): FSDP2 shards floating-point
tensors only, and with every other weight in bf16 too each block's weights all-gather as one dtype (the
packed 4-bit values travel untouched: bf16 is already the compute dtype, so FSDP casts nothing). Each rank
loads and quantizes the model on its own GPU (a 4-bit copy, a quarter of the bf16 weights) before it is
sharded. The adapters get PEFT's initial values from the run's seed on every rank, as without
quantization; checkpoints, resume and exports are LoRA's (the merged export merges into the base's own
full-precision files).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from trainer.lora.adapters import Adapters
from trainer.model.source import ModelSource
from trainer.parallel import Dist
from trainer.wire.config import TrainerConfig

PACKAGE = "bitsandbytes>=0.50,<1"


def refusal(cfg: TrainerConfig, cuda: bool) -> str | None:
    """Why this node cannot train ``lora.quantize`` (``None``: it can, or nothing is quantized)."""
    if cfg.lora is None or cfg.lora.quantize is None:
        return None
    if not cuda:
        return (f"parameters.lora.quantize: {cfg.lora.quantize} runs through bitsandbytes on CUDA and this node's "
                "torch has no CUDA device; remove lora.quantize to train LoRA on the full-precision base")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return (f"parameters.lora.quantize: {cfg.lora.quantize} needs bitsandbytes on every node: add "
                f"'{PACKAGE}' to environment.dependencies (or pip install 'fsdp-tui[qlora]' there)")
    if cfg.fsdp.cpu_offload:
        return ("parameters.fsdp.cpu_offload: 4-bit weights are quantized and kept on the GPU; set "
                "fsdp.cpu_offload: false with lora.quantize")
    if cfg.model.dtype == "float32":
        return "parameters.model.dtype: float32 with lora.quantize: the 4-bit base computes in bf16; use auto"
    return None


def build(cfg: TrainerConfig, source: ModelSource, attn: str, d: Dist, prepare: Callable[[nn.Module], nn.Module],
          adapters: Adapters) -> nn.Module:
    """The base loaded in 4-bit on this rank's GPU, then ``prepare`` (adapters, activation checkpointing,
    compile, FSDP2) and the adapters' initial values."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=cfg.lora.quantize,
                               bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16,
                               bnb_4bit_quant_storage=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(source.path, quantization_config=quant,
                                                 dtype=torch.bfloat16, device_map={"": d.device},
                                                 attn_implementation=attn,
                                                 trust_remote_code=cfg.model.trust_remote_code)
    model.config.use_cache = False
    model = prepare(model)
    adapters.fill(model)  # PEFT's initial values from the run's seed: the same on every rank
    return model
