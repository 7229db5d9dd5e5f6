"""What a run trains of the model, as one component the job asks without knowing which it has.

Full fine-tuning is the null case (every weight trains, the checkpoint holds the whole model, the export is
the model); LoRA puts adapters on the skeleton before it is sharded, fills them after the base is read,
checkpoints and exports the adapters only; QLoRA is LoRA on a base loaded in 4-bit. The job asks, in its
order: :meth:`FullFineTune.refusal` (before the process group exists), :meth:`~FullFineTune.apply` (on the
weightless skeleton, before sharding), :meth:`~FullFineTune.build` (the model filled), what a checkpoint
keeps (:meth:`~FullFineTune.app_state`, :meth:`~FullFineTune.checkpoint_meta`), the start's
:meth:`~FullFineTune.summary` line and the end's :meth:`~FullFineTune.export`. :func:`of` chooses from
the parameters, :func:`of_checkpoint` from a checkpoint's ``meta.json`` (``python -m trainer.export``):
those two are the only places that tell the cases apart.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer import parallel
from trainer.ckpt import checkpoint
from trainer.ckpt.checkpoint import AppState
from trainer.loop.state import TrainState
from trainer.lora import adapters as lora
from trainer.lora import qlora
from trainer.model import build as model
from trainer.model.source import ModelSource
from trainer.wire import ckpt_layout
from trainer.wire.config import LoraConfig, TrainerConfig

Prepare = Callable[[nn.Module], nn.Module]
"""Wraps and shards the weightless skeleton (activation checkpointing, compile, FSDP2)."""


class FullFineTune:
    """Every weight trains: nothing added to the model, the whole of it checkpointed and exported."""

    def __init__(self, cfg: TrainerConfig) -> None:
        self.cfg = cfg
        self.weights: model.BaseWeights = model.BaseWeights()
        """How the built model's weights meet the base's files (:func:`trainer.model.build.build_model`)."""

    def refusal(self, cuda: bool) -> str | None:
        """Why this node cannot train it (``None``: it can)."""
        return None

    def apply(self, skeleton: nn.Module) -> nn.Module:
        """The weightless skeleton as it trains, before it is sharded."""
        return skeleton

    def base_parameters(self, module: nn.Module) -> list[nn.Parameter] | None:
        """The parameters of ``module`` (the applied skeleton or a part of it) that are the base model's,
        which the memory prediction counts as built; ``None``: the base is not stored as those parameters,
        and the prediction counts it from the model's config. Here: every one."""
        return list(module.parameters())

    def build(self, source: ModelSource, hf_config, attn: str, d: parallel.Dist, prepare: Prepare) -> nn.Module:
        """The model built without weights, wrapped and sharded by ``prepare``, then filled shard by shard."""
        cfg = self.cfg
        return model.build_model(source, cfg.model, hf_config, attn, cfg.seed, parallel.param_device(cfg.fsdp, d),
                                 prepare, buffer_device=d.device, adapters=self.weights)

    def app_state(self, net: nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                  state: TrainState) -> AppState:
        """What a checkpoint saves and a resume restores."""
        return AppState(net, optimizer, scheduler, state)

    def checkpoint_meta(self) -> dict[str, Any]:
        """What a checkpoint's ``meta.json`` says of it (beside the model's name)."""
        return {}

    def summary(self, net: nn.Module) -> str | None:
        """The start's line about it (``None``: nothing to say)."""
        return None

    def export(self, net: nn.Module, tokenizer, source: ModelSource, step: int, d: parallel.Dist) -> None:
        """The Hugging Face export ``checkpoint.export_hf`` asks for, under ``<output_dir>/hf/step-N``."""
        if self.cfg.checkpoint.export_hf:
            out = checkpoint.export_hf(net, tokenizer, self.cfg.output_dir, ckpt_layout.step_name(step), d)
            if out is not None:
                print(f"exported Hugging Face model to {out}", flush=True)

    @classmethod
    def export_checkpoint(cls, path: str, out: Path, merged: bool, adapter: bool) -> int:
        """``python -m trainer.export``: the whole model of the checkpoint at ``path``; an exit code."""
        from trainer.ckpt.inference import load_for_inference

        if merged:
            print(f"{path} is a full fine-tune's checkpoint: its export is the whole model already (no "
                  "adapter to merge); leave out --merged", file=sys.stderr)
            return 1
        try:
            net, tokenizer = load_for_inference(path)
        except (ValueError, FileNotFoundError) as err:
            print(f"cannot export: {err}", file=sys.stderr)
            return 1
        net.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        print(f"exported {path} -> {out}")
        return 0


class Lora(FullFineTune):
    """LoRA adapters through PEFT: the base frozen, the adapters (and ``modules_to_save``) train, are
    checkpointed and exported (in PEFT's format, and merged into the base when asked)."""

    def __init__(self, cfg: TrainerConfig, settings: LoraConfig) -> None:
        super().__init__(cfg)
        self.settings = settings
        self.adapters = lora.Adapters(settings, cfg.seed, cfg.model_name)
        self.weights = self.adapters

    def apply(self, skeleton: nn.Module) -> nn.Module:
        return self.adapters.apply(skeleton)

    def base_parameters(self, module: nn.Module) -> list[nn.Parameter] | None:
        """The base's only: the adapters and the trained copies (``modules_to_save``) are the prediction's
        own count."""
        return [p for n, p in module.named_parameters() if lora.of_base(n)]

    def app_state(self, net: nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                  state: TrainState) -> AppState:
        return lora.AdapterState(net, optimizer, scheduler, state)

    def checkpoint_meta(self) -> dict[str, Any]:
        """Its settings (the checkpoint holds the adapters only; export and resume read the base from
        ``model_name``)."""
        return {ckpt_layout.LORA: self.settings.model_dump(mode="json")}

    def summary(self, net: nn.Module) -> str | None:
        return self.adapters.summary(net)

    def export(self, net: nn.Module, tokenizer, source: ModelSource, step: int, d: parallel.Dist) -> None:
        """The adapter (``checkpoint.export_hf``) and the merged model (``checkpoint.export_merged``)."""
        ckpt = self.cfg.checkpoint
        if ckpt.export_hf or ckpt.export_merged:
            from trainer.lora import export as lora_export

            out = Path(self.cfg.output_dir) / "hf" / ckpt_layout.step_name(step)
            lora_export.export_in_job(net, tokenizer, self.cfg, source, out, d)

    @classmethod
    def export_checkpoint(cls, path: str, out: Path, merged: bool, adapter: bool) -> int:
        """The adapter in PEFT's format (``adapter``) and merged into the base (``merged``)."""
        from trainer.ckpt.inference import check_whole
        from trainer.ckpt.store import open_store
        from trainer.lora.export import MERGED_SUFFIX, load_adapter, write_adapter, write_merged
        from trainer.wire.config import ModelConfig

        folder = Path(path).expanduser()
        try:
            check_whole(open_store(str(folder.parent)), str(folder))
        except ValueError as err:
            print(f"cannot export: {err}", file=sys.stderr)
            return 1
        saved = ckpt_layout.meta_of(str(folder))
        assert saved is not None  # a whole checkpoint's meta.json parses
        source = ModelSource.resolve(saved["model_name"], saved["tokenizer"])
        settings = LoraConfig.model_validate(saved[ckpt_layout.LORA])
        state = load_adapter(folder, settings, source)
        tok = model.load_tokenizer(source, ModelConfig())
        if adapter:
            print(f"exported {folder} -> {write_adapter(state, settings, source, False, out, tok)} (LoRA adapter)")
        if merged:
            target = out.with_name(out.name + MERGED_SUFFIX) if adapter else out
            print(f"exported {folder} -> {write_merged(state, settings, source, False, target, tok)} (merged)")
        return 0


class QLora(Lora):
    """LoRA on a base loaded in 4-bit NF4 on each rank's GPU (:mod:`trainer.lora.qlora`)."""

    def refusal(self, cuda: bool) -> str | None:
        return qlora.refusal(self.cfg, cuda)

    def base_parameters(self, module: nn.Module) -> list[nn.Parameter] | None:
        """None: the base is stored in 4-bit, counted from the config."""
        return None

    def build(self, source: ModelSource, hf_config, attn: str, d: parallel.Dist, prepare: Prepare) -> nn.Module:
        return qlora.build(self.cfg, source, attn, d, prepare, self.adapters)


def of(cfg: TrainerConfig) -> FullFineTune:
    """The run's adaptation, from its parameters (``lora``, ``lora.quantize``)."""
    if cfg.lora is None:
        return FullFineTune(cfg)
    return (QLora if cfg.lora.quantize is not None else Lora)(cfg, cfg.lora)


def of_checkpoint(path: str) -> type[FullFineTune]:
    """The adaptation a checkpoint was saved by: LoRA's when its ``meta.json`` (a local folder's) records
    LoRA settings (it holds the adapters only: :func:`trainer.wire.ckpt_layout.holds_adapters`), else full
    fine-tuning's."""
    return Lora if ckpt_layout.holds_adapters(ckpt_layout.meta_of(str(Path(path).expanduser()))) else FullFineTune
