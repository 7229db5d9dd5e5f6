"""Load or initialise a Hugging Face causal LM and its tokenizer; activation checkpointing; compile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from trainer.model import loading
from trainer.model.attention import AttentionSupport
from trainer.model.source import ModelSource
from trainer.wire.config import ModelConfig

_DTYPES = {"auto": torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16}


def load_tokenizer(source: ModelSource, cfg: ModelConfig):
    """The tokenizer of ``source`` (``model.tokenizer``'s where one is named), with a pad token."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source.tokenizer_path,
                                        trust_remote_code=cfg.trust_remote_code)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def hf_config(source: ModelSource, cfg: ModelConfig):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(source.path, trust_remote_code=cfg.trust_remote_code)


def attention_support(config, source: ModelSource, cfg: ModelConfig) -> AttentionSupport:
    """What the model's class declares: an sdpa and a flex attention implementation, attention through
    Hugging Face's attention interface, a state carried along the sequence, a forward that takes
    ``position_ids``."""
    import inspect

    from transformers import AutoModelForCausalLM

    mapping = AutoModelForCausalLM._model_mapping
    if type(config) in mapping:
        cls = mapping[type(config)]
        if isinstance(cls, (list, tuple)):
            cls = cls[0]
    else:
        from transformers.dynamic_module_utils import get_class_from_dynamic_module

        cls = get_class_from_dynamic_module(config.auto_map["AutoModelForCausalLM"], source.path)
    from trainer.model.router_loss import computes_loss

    return AttentionSupport(*(bool(getattr(cls, name, False)) for name in (
        "_supports_sdpa", "_supports_flex_attn", "_supports_attention_backend")), stateful=carries_state(cls, config),
        position_ids="position_ids" in inspect.signature(cls.forward).parameters, router_loss=computes_loss(cls))


def carries_state(cls, config) -> bool:
    """Whether the model's layers carry a state along the sequence, as the installed transformers says: its
    class's ``_is_stateful`` mark (up to transformers 5.24), or a layer type of its config (or its text
    config) that transformers' cache keeps as a recurrent state, not per token (5.25 on: ``linear_attention``,
    ``conv``, the hybrids)."""
    if getattr(cls, "_is_stateful", False):
        return True
    try:
        from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, LinearAttentionCacheLayerMixin
    except ImportError:
        return False
    recurrent = {name for name, layer in DYNAMIC_LAYER_TYPE_MAPPING.items()
                 if isinstance(layer, type) and issubclass(layer, LinearAttentionCacheLayerMixin)}
    configs = [config]
    try:
        configs.append(config.get_text_config())
    except (AttributeError, ValueError):  # no text config, or several of them
        pass
    return any(isinstance(kind, str) and kind in recurrent
               for c in configs for kind in (getattr(c, "layer_types", None) or ()))


class BaseWeights:
    """How a built model's weights meet the base model's files in full fine-tuning, the null case of an
    adaptation: every weight under its own name, none of the model's own to fill. LoRA's adapters
    (:class:`trainer.lora.adapters.Adapters`) answer the same three questions for a model with adapters;
    :func:`build_model` asks them without knowing which it has."""

    def base_name(self, name: str) -> str | None:
        """The weights' name of the model's parameter ``name`` (``None``: the model's own, not the base's)."""
        return loading.clean_name(name)

    def full_state(self, base: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's state from the base's (rank 0, before it broadcasts the weights)."""
        return base

    def fill(self, model: nn.Module) -> None:
        """Fill what the base's files do not hold, once they are read (here: nothing)."""


def build_model(source: ModelSource, cfg: ModelConfig, config, attn: str, seed: int, device: torch.device,
                prepare: Callable[[nn.Module], nn.Module], buffer_device: torch.device | None = None,
                adapters: BaseWeights | None = None) -> nn.Module:
    """The model with its weights in place, built on the meta device and filled shard by shard: its
    parameters on ``device`` (the host with CPU offload), its buffers on ``buffer_device`` (the GPU).

    ``prepare`` wraps and shards the weightless skeleton (activation checkpointing, compile, FSDP);
    then each rank reads its shards from the safetensors, or rank 0 broadcasts a model it loads or
    initialises (``from_scratch``, non-safetensors weights). ``adapters`` says how the weights meet the
    base's files (:class:`BaseWeights`, the default; LoRA's :class:`trainer.lora.adapters.Adapters`, which
    ``prepare`` applied, reads the base weights under their base names and gives the adapters PEFT's
    initial values)."""
    from transformers import AutoModelForCausalLM

    weights = adapters or BaseWeights()

    with loading.parameters_on_meta():
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=_DTYPES[cfg.dtype],
                                                 trust_remote_code=cfg.trust_remote_code)
    model.config.use_cache = False
    model = prepare(model)
    loading.materialize(model, device)
    if cfg.from_scratch or not loading.fill_from_safetensors(model, weights_folder(source), weights.base_name):
        import torch.distributed as dist

        full = load_model(source, cfg, seed, attn).state_dict() if dist.get_rank() == 0 else None
        loading.fill_by_broadcast(model, None if full is None else weights.full_state(full, model))
    else:
        weights.fill(model)
    loading.move_buffers(model, buffer_device or device)
    return model


def weights_folder(source: ModelSource) -> Path:
    """A local folder holding the model's weights: the folder itself, or the hub snapshot (downloaded
    once per node into the Hugging Face cache)."""
    path = Path(source.path).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(source.path, allow_patterns=["*.json", "*.safetensors"]))


def load_model(source: ModelSource, cfg: ModelConfig, seed: int, attn: str | None = None) -> nn.Module:
    """The whole model on the host: fp32 master weights unless ``dtype`` says otherwise (mixed
    precision is FSDP's job). ``attn`` is the Hugging Face implementation name; ``None`` takes what
    the model has for inference (sdpa, else eager: :attr:`AttentionSupport.inference`)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path, dtype = source.path, _DTYPES[cfg.dtype]
    config = AutoConfig.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
    if attn is None:
        attn = attention_support(config, source, cfg).inference
    if cfg.from_scratch:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=dtype,
                                                 trust_remote_code=cfg.trust_remote_code)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, config=config, attn_implementation=attn, dtype=dtype,
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


COMPILE_MIN_STEPS = 500
"""``compile: auto`` compiles GPU runs of at least this many optimiser steps."""


def choose_compile(setting: bool | str, device_type: str, total_steps: int) -> tuple[bool, str | None]:
    """Whether to compile the decoder blocks, and a line saying why when ``auto`` decided."""
    if setting != "auto":
        return bool(setting), None
    if device_type != "cuda":
        return False, "compile: off (auto: CPU, where compiling takes longer than it saves)"
    if total_steps < COMPILE_MIN_STEPS:
        return False, (f"compile: off (auto: {total_steps} steps, fewer than {COMPILE_MIN_STEPS} to pay back "
                       "compiling; set model.compile: true to override)")
    return True, f"compile: on (auto: GPU, {total_steps} steps; set model.compile: false to override)"


def apply_compile(model: nn.Module, backend: str = "inductor") -> None:
    """Compile each decoder block with its sizes dynamic from the start: batches change sequence
    length (and the last one its size), and a static first graph would be compiled again at the
    first new size. The blocks share one code object, so every variant (mask or none, activation
    recomputation) counts against one dynamo recompile limit, past which they run eagerly for the
    rest of the run; evaluation therefore runs eagerly (:func:`trainer.loop.train.evaluate`) and the
    trainer logs every new graph (:class:`CompileWatch`)."""
    for block in decoder_blocks(model):
        block.compile(backend=backend, dynamic=True)


class CompileWatch:
    """Counts the graphs dynamo has compiled, to say when a step compiled again and when the
    recompile limit was reached (dynamo then says so once, in a warning that is easy to miss)."""

    def __init__(self) -> None:
        self.seen = self.graphs()

    @staticmethod
    def graphs() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    @staticmethod
    def limit() -> int:
        import torch._dynamo.config as config

        return int(getattr(config, "recompile_limit", None) or getattr(config, "cache_size_limit", 8))

    def news(self, step: int) -> str | None:
        """A line when graphs were compiled since the last call, else ``None``."""
        now = self.graphs()
        if now == self.seen:
            return None
        first, self.seen = self.seen == 0, now
        line = f"compile: {now} graph{'s' if now != 1 else ''} compiled by step {step}"
        if not first:
            line += " (recompiled: a new shape or variant)"
        if now >= self.limit():
            line += (f"; dynamo's recompile limit is {self.limit()}: further variants run eagerly "
                     "(TORCH_LOGS=recompiles says why each recompiled)")
        return line


def _parent_of(root: nn.Module, child: nn.Module) -> tuple[nn.Module, str]:
    for module in root.modules():
        for name, sub in module.named_children():
            if sub is child:
                return module, name
    raise LookupError("block not found in model")
