"""Load or initialise a Hugging Face causal LM and its tokenizer; activation checkpointing; compile."""

from __future__ import annotations

import torch
from torch import nn

from trainer.assets import resolve_model
from trainer.config import ModelConfig


def load_tokenizer(model_name: str, cfg: ModelConfig):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model(cfg.tokenizer or model_name),
                                        trust_remote_code=cfg.trust_remote_code)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(model_name: str, cfg: ModelConfig, seed: int) -> nn.Module:
    """fp32 master weights unless ``dtype`` says otherwise; mixed precision is FSDP's job."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = resolve_model(model_name)
    dtype = {"auto": torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.dtype]
    attn = {"sdpa": "sdpa", "flex": "flex_attention", "eager": "eager"}[cfg.attention]
    if cfg.from_scratch:
        config = AutoConfig.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=dtype,
                                                 trust_remote_code=cfg.trust_remote_code)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attn, dtype=dtype,
                                                     trust_remote_code=cfg.trust_remote_code)
    model.config.use_cache = False
    return model


def decoder_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks FSDP wraps one by one, found through HF's ``_no_split_modules``."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise ValueError(f"cannot find the decoder blocks of {type(model).__name__} "
                         "(no _no_split_modules); this model is not supported")
    return blocks


def apply_activation_checkpointing(model: nn.Module, mode: str) -> None:
    """Wrap blocks so their activations are recomputed in backward: all (full) or every other one."""
    if mode == "off":
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for i, block in enumerate(decoder_blocks(model)):
        if mode == "selective" and i % 2:
            continue
        parent, name = _parent_of(model, block)
        setattr(parent, name, checkpoint_wrapper(block, preserve_rng_state=False))


def apply_compile(model: nn.Module) -> None:
    for block in decoder_blocks(model):
        block.compile()


def _parent_of(root: nn.Module, child: nn.Module) -> tuple[nn.Module, str]:
    for module in root.modules():
        for name, sub in module.named_children():
            if sub is child:
                return module, name
    raise LookupError("block not found in model")
