"""LoRA through PEFT on FSDP2: the adapters are put on the weightless skeleton before it is sharded.

The trainer builds the model on the meta device, shards it, then fills each rank's shards
(:mod:`trainer.model.loading`). LoRA fits in that order: :meth:`Adapters.apply` wraps the skeleton with
``peft.get_peft_model`` (PEFT's own layers, names and matching rules) and freezes the base, so FSDP2
shards frozen and trainable weights alike but only the adapters get gradients, optimiser state and a
place in checkpoints. PEFT initialises the adapters as it always does, on host copies made with the
run's seed (the same values on every rank); :meth:`Adapters.fill` copies each rank's rows of them into
its shards once the base weights are read, under their base names, from the model's safetensors.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from trainer.ckpt.checkpoint import AppState
from trainer.loop.state import TrainState
from trainer.model.build import BaseWeights
from trainer.model.loading import clean_name
from trainer.wire.config import LoraConfig, SettingError

ADAPTER = "default"
"""The one adapter the trainer trains (PEFT's default name)."""
_PREFIX = "base_model.model."
_TRAINED_COPY = f".modules_to_save.{ADAPTER}."


def peft_config(cfg: LoraConfig, base_model: str = "", model: nn.Module | None = None):
    """The ``peft.LoraConfig`` of ``cfg``: PEFT's names, one adapter, no bias. With the base ``model``, a
    mixture of experts' fused expert weights (3-D parameters such as ``mlp.experts.gate_up_proj``, no
    layer of their own) are adapted through PEFT's parameter targeting: every one of them for
    ``all-linear`` (as ``all-linear`` adapts every linear layer of a dense model), and those a listed
    name matches."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import TaskType

    targets = cfg.target_modules if isinstance(cfg.target_modules, str) else list(cfg.target_modules)
    parameters = None
    if model is not None:
        experts = expert_weights(model)
        if isinstance(targets, str):
            parameters = sorted({leaf for leaf, _ in experts}) or None
        else:
            modules = _module_paths(model)
            named = [t for t in targets if not _matches(t, modules) and _matches(t, [path for _, path in experts])]
            targets = [t for t in targets if t not in named]
            parameters = named or None
    return PeftLoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets,
                          target_parameters=parameters,
                          modules_to_save=list(cfg.modules_to_save) if cfg.modules_to_save else None,
                          task_type=TaskType.CAUSAL_LM, bias="none", base_model_name_or_path=base_model or None)


def expert_weights(model: nn.Module) -> list[tuple[str, str]]:
    """(leaf name, path) of every fused expert weight: a parameter of three or more dimensions held by a
    module directly (PEFT's wrapper names stripped), e.g. ``("gate_up_proj", "model.layers.0.mlp.experts.gate_up_proj")``."""
    found = []
    for name, module in model.named_modules():
        for pname, param in module.named_parameters(recurse=False):
            if param.dim() >= 3:
                found.append((pname, base_name(f"{name}.{pname}" if name else pname) or pname))
    return found


def _module_paths(model: nn.Module) -> list[str]:
    return [n for n, _ in model.named_modules() if n]


def _matches(target: str, paths: list[str]) -> bool:
    """PEFT's rule for a listed name: a path that is the name or ends with it."""
    return any(p == target or p.endswith(f".{target}") for p in paths)


def of_base(name: str) -> bool:
    """A PEFT model's parameter ``name`` is the base model's own: neither an adapter's nor a trained copy's
    (``modules_to_save``)."""
    return ".lora_" not in f".{name}" and ".modules_to_save." not in f".{name}"


def base_name(name: str) -> str | None:
    """The base model's name of a PEFT model's parameter or buffer (``None`` for an adapter's own):
    ``base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight`` ->
    ``model.layers.0.self_attn.q_proj.weight``; a trained copy (``modules_to_save``) reads the weight
    it copies; an expert weight wrapped twice (``mlp.experts.base_layer.base_layer.gate_up_proj``) the
    weight itself."""
    name = clean_name(name)
    if name.startswith(_PREFIX):
        name = name[len(_PREFIX):]
    if ".lora_" in f".{name}":
        return None
    for part in (".base_layer.", _TRAINED_COPY, ".original_module."):
        while part in name:
            name = name.replace(part, ".")
    return name


def missing_targets(model: nn.Module, cfg: LoraConfig) -> list[str]:
    """The names of ``target_modules`` and ``modules_to_save`` that no module of ``model`` matches, by
    PEFT's own rule (a name matches a module whose path ends with it), nor a fused expert weight, nor an
    expert layer's name before transformers fused them (``gate_proj``, ``w1``: PEFT maps those)."""
    from peft.tuners.tuners_utils import check_target_module_exists

    names = [n for n, _ in model.named_modules() if n]
    experts = [path for _, path in expert_weights(model)]
    missing = []
    if isinstance(cfg.target_modules, list):
        for target in cfg.target_modules:
            one = peft_config(cfg.model_copy(update={"target_modules": [target], "modules_to_save": None}))
            if not any(check_target_module_exists(one, n) for n in names) and not _matches(target, experts) \
                    and target not in _fused_names(model):
                missing.append(target)
    for kept in cfg.modules_to_save or ():
        if not any(n == kept or n.endswith(f".{kept}") for n in names):
            missing.append(kept)
    return missing


def _fused_names(model: nn.Module) -> set[str]:
    """The expert layers' names before transformers fused them, which PEFT maps onto the fused weights
    for this model's family (``peft.utils.transformers_weight_conversion``); none where it maps nothing."""
    try:
        from peft.utils.transformers_weight_conversion import (
            _MODEL_TO_CONVERSION_PATTERN,
            _MOE_TARGET_MODULE_MAPPING,
        )
    except ImportError:
        return set()
    pattern = _MODEL_TO_CONVERSION_PATTERN.get(getattr(getattr(model, "config", None), "model_type", None))
    return set(_MOE_TARGET_MODULE_MAPPING.get(pattern, {})) if pattern else set()


def module_names(model: nn.Module) -> list[str]:
    """The distinct last names of the model's layers that LoRA can adapt (what a target may name), its
    fused expert weights among them."""
    kinds = (nn.Linear, nn.Embedding)
    found = {n.rsplit(".", 1)[-1] for n, m in model.named_modules()
             if n and (isinstance(m, kinds) or type(m).__name__ == "Conv1D")}
    return sorted(found | {leaf for leaf, _ in expert_weights(model)})


class Adapters(BaseWeights):
    """The run's LoRA adapters between building the skeleton and filling its shards: PEFT's initial
    values (host copies, the same on every rank) and the names that map to the base's weights."""

    def __init__(self, cfg: LoraConfig, seed: int, model_name: str = "") -> None:
        self.cfg, self.seed, self.model_name = cfg, seed, model_name
        self.initial: dict[str, torch.Tensor] = {}
        """Each adapter parameter's initial full value, by its clean name."""

    base_name = staticmethod(base_name)

    def apply(self, skeleton: nn.Module) -> nn.Module:
        """``skeleton`` (on the meta device, not yet sharded) as a PEFT model with the base frozen.
        A target the model does not have stops the run with one line naming the key."""
        from peft import get_peft_model

        missing = missing_targets(skeleton, self.cfg)
        if missing:
            key = "target_modules" if set(missing) - set(self.cfg.modules_to_save or ()) else "modules_to_save"
            raise SettingError(
                f"parameters.lora.{key}: {type(skeleton).__name__} has no module named "
                f"{', '.join(repr(m) for m in missing)}; its layers are named: {', '.join(module_names(skeleton))} "
                "(or use target_modules: all-linear)")
        config = peft_config(self.cfg, self.model_name, skeleton)
        if config.target_parameters and self.cfg.dropout:
            raise SettingError(
                f"parameters.lora.dropout: PEFT adapts {type(skeleton).__name__}'s fused expert weights "
                f"({', '.join(sorted(config.target_parameters))}) without dropout: set lora.dropout: 0, or list "
                f"target_modules without them (its layers are named: {', '.join(module_names(skeleton))})")
        try:
            model = get_peft_model(skeleton, config, autocast_adapter_dtype=False)
        except ValueError as err:  # PEFT's own word on targets it cannot adapt (a fused pair named by half)
            raise SettingError(f"parameters.lora.target_modules: {str(err).splitlines()[0]}") from None
        self.initial = self._initial_values(model)
        return model

    def _initial_values(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """PEFT's own initialisation of every adapter, run on host copies of its (meta) layers under the
        run's seed: the same values on every rank, whatever the sharding."""
        from peft.tuners.lora import LoraLayer

        out: dict[str, torch.Tensor] = {}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            for name, layer in model.named_modules():
                if not isinstance(layer, LoraLayer):
                    continue
                kept = {}
                for attr in layer.adapter_layer_names:
                    holder = getattr(layer, attr)
                    if ADAPTER in holder:
                        kept[attr] = holder[ADAPTER]
                        holder[ADAPTER] = _on_host(holder[ADAPTER])
                layer.reset_lora_parameters(ADAPTER, True)
                for attr, meta in kept.items():
                    real = getattr(layer, attr)[ADAPTER]
                    pairs = real.named_parameters() if isinstance(real, nn.Module) else [("", real)]
                    for pname, value in pairs:
                        key = ".".join(p for p in (name, attr, ADAPTER, pname) if p)
                        out[clean_name(key)] = value.detach().clone()
                    getattr(layer, attr)[ADAPTER] = meta
        return out

    def fill(self, model: nn.Module) -> None:
        """Copy this rank's rows of each adapter's initial value into its (sharded) parameter."""
        from trainer.model.loading import local_part

        with torch.no_grad():
            for name, param in model.named_parameters():
                value = self.initial.get(clean_name(name))
                if value is not None:
                    local, first = local_part(param)
                    local.copy_(value[first:first + local.shape[0]] if local.dim() else value)

    def full_state(self, base: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
        """The PEFT model's full state from the base model's (rank 0, when it broadcasts the weights):
        base weights under their PEFT names, the adapters' initial values beside them."""
        out = {}
        for name in model.state_dict(keep_vars=True):  # every name, a tied weight's second one too
            clean = clean_name(name)
            if clean in self.initial:
                out[clean] = self.initial[clean]
            elif base_name(clean) in base:
                out[clean] = base[base_name(clean)]
        return out

    def summary(self, model: nn.Module) -> str:
        """One line for the log: what is adapted and how much trains."""
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = weight_count(model)
        adapted = sorted({_adapted_name(n, m) for n, m in model.named_modules() if _is_lora_layer(m)})
        targets = self.cfg.target_modules if isinstance(self.cfg.target_modules, str) else "listed"
        return (f"lora: r={self.cfg.r} alpha={self.cfg.alpha:g} dropout={self.cfg.dropout:g} on "
                f"{', '.join(adapted)} ({targets}); {trainable / 1e6:.3f}M of {total / 1e6:.2f}M parameters "
                f"train ({100 * trainable / max(total, 1):.2f}%), the base is frozen")


def weight_count(model: nn.Module) -> int:
    """How many weights ``model`` has, a 4-bit layer's counted by its shape: QLoRA stores several 4-bit
    weights in each bf16 element (``bnb_4bit_quant_storage``), so the stored elements undercount the base
    and would make the trained share look larger than it is."""
    packed = {id(m.weight): m.in_features * m.out_features for m in model.modules()
              if type(m).__name__ == "Linear4bit" and isinstance(getattr(m, "weight", None), torch.Tensor)}
    return sum(packed.get(id(p), p.numel()) for p in model.parameters())


def _adapted_name(name: str, layer: nn.Module) -> str:
    """What a LoRA layer adapts, as a target names it: its layer, or the expert weight it wraps."""
    weight = getattr(layer, "parameter_name", None)
    return weight if weight and weight != "weight" else base_name(name).rsplit(".", 1)[-1]


def _is_lora_layer(module: nn.Module) -> bool:
    from peft.tuners.lora import LoraLayer

    return isinstance(module, LoraLayer)


def _on_host(holder: Any) -> Any:
    """A host copy of a (meta) adapter module or parameter, its values not yet set."""
    if isinstance(holder, nn.Module):
        return copy.deepcopy(holder).to_empty(device="cpu")
    return nn.Parameter(torch.empty_like(holder, device="cpu"), requires_grad=holder.requires_grad)


def state_dict_options():
    """What DCP saves and restores of a LoRA model: its trainable weights only (the frozen base is
    read from the model's own files), with their optimiser state."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, strict=False)


class AdapterState(AppState):
    """A LoRA run's checkpointed state: the trainable weights (adapters, ``modules_to_save``) and their
    optimiser state, the schedule, the trainer's position and RNG; never the frozen base. torch's
    ``ignore_frozen_params`` misses a frozen weight reached under a second name (a tied output layer:
    the whole embedding), so the model's entries are also kept to the trainable parameters' names."""

    def __init__(self, model: nn.Module, optimizer, scheduler, trainer: TrainState) -> None:
        super().__init__(model, optimizer, scheduler, trainer, state_dict_options())
        self.trainable = {clean_name(n) for n, p in model.named_parameters() if p.requires_grad}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["model"] = {k: v for k, v in state["model"].items() if clean_name(k) in self.trainable}
        return state
