"""A LoRA run's exports: the adapter in PEFT's format, and the base model with the adapter merged.

Both are written from a weightless copy of the PEFT model (the base on the meta device) holding only
the adapter's values, which are small: at the end of a run rank 0 gathers them from the shards, and
``python -m trainer.export`` reads them from an adapters-only checkpoint.

- The adapter: ``PeftModel.save_pretrained`` (``adapter_config.json`` + ``adapter_model.safetensors``),
  which ``PeftModel.from_pretrained(base, folder)`` loads.
- The merged model: the base's safetensors files are read one at a time; each weight an adapter
  changes is merged by PEFT's own layer (``merge``), and the file is written out under the same name
  before the next is read. Only one file of the model is in memory at once, never the whole model; a
  base without safetensors files, or whose files keep an adapted weight under other names (a mixture of
  experts stored one expert per tensor, which transformers fuses on load), is loaded once and merged
  with ``merge_and_unload``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import torch
from torch import nn

from trainer.lora import adapters as lora
from trainer.model.loading import SafetensorsIndex, clean_name, parameters_on_meta
from trainer.model.source import ModelSource
from trainer.parallel import Dist
from trainer.wire.config import LoraConfig, TrainerConfig

MERGED_SUFFIX = "-merged"
"""The merged model's folder is the adapter's folder name with this after it."""


def export_in_job(net: nn.Module, tok, cfg: TrainerConfig, source: ModelSource, out_dir: Path, d: Dist) -> None:
    """At the end of a run: gather the adapter to rank 0 (collective), which writes the adapter
    (``checkpoint.export_hf``) and the merged model (``checkpoint.export_merged``)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(net, options=StateDictOptions(full_state_dict=True, cpu_offload=True,
                                                                ignore_frozen_params=True))
    if not d.is_main:
        return
    state = {clean_name(k): v for k, v in state.items()}
    if cfg.checkpoint.export_hf:
        print(f"exported the LoRA adapter (PEFT format) to "
              f"{write_adapter(state, cfg.lora, source, cfg.model.trust_remote_code, out_dir, tok)}",
              flush=True)
    if cfg.checkpoint.export_merged:
        merged = out_dir.with_name(out_dir.name + MERGED_SUFFIX)
        print(f"exported the merged model to "
              f"{write_merged(state, cfg.lora, source, cfg.model.trust_remote_code, merged, tok)}",
              flush=True)


def skeleton(cfg: LoraConfig, source: ModelSource, trust_remote_code: bool) -> nn.Module:
    """The PEFT model with every weight on the meta device (no memory): names and layers only."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(source.path, trust_remote_code=trust_remote_code)
    with parameters_on_meta():
        base = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return lora.Adapters(cfg, seed=0, model_name=source.name).apply(base)


def adapter_names(model: nn.Module) -> dict[str, torch.Size]:
    """Every trainable (adapter or ``modules_to_save``) parameter of a PEFT model, with its shape."""
    return {clean_name(n): p.shape for n, p in model.named_parameters() if p.requires_grad}


def _with_values(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put ``state``'s values (by clean name) in the model's parameters, replacing the meta ones."""
    for name, module in model.named_modules():
        for pname, param in list(module._parameters.items()):
            full = clean_name(f"{name}.{pname}" if name else pname)
            if param is not None and full in state:
                module._parameters[pname] = nn.Parameter(state[full].to(param.dtype), requires_grad=False)


def write_adapter(state: dict[str, torch.Tensor], cfg: LoraConfig, source: ModelSource, trust_remote_code: bool,
                  out_dir: Path, tok=None) -> Path:
    """The adapter in PEFT's format in a new folder (``out_dir``, or ``out_dir-<time>`` when taken)."""
    model = skeleton(cfg, source, trust_remote_code)
    model.peft_config[lora.ADAPTER].base_model_name_or_path = source.path
    _with_values(model, state)

    def write(tmp: Path) -> None:
        model.save_pretrained(str(tmp), state_dict={k: v.contiguous() for k, v in state.items()},
                              safe_serialization=True)
        if tok is not None:
            tok.save_pretrained(tmp)

    return _new_folder(out_dir, write)


def write_merged(state: dict[str, torch.Tensor], cfg: LoraConfig, source: ModelSource, trust_remote_code: bool,
                 out_dir: Path, tok=None) -> Path:
    """The base with the adapter merged, a folder ``from_pretrained`` loads, written file by file."""
    from trainer.model.build import weights_folder

    folder = weights_folder(source)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return _new_folder(out_dir, lambda tmp: _merge_whole(state, cfg, source, trust_remote_code, tmp, tok))
    model = skeleton(cfg, source, trust_remote_code)
    _with_values(model, state)
    owners = _merge_owners(model)
    index = SafetensorsIndex(folder)
    prefix = getattr(model.get_base_model(), "base_model_prefix", "")
    if any(not isinstance(owner, torch.Tensor) and index.find(name, prefix) is None for name, owner in owners.items()):
        # a weight the files keep otherwise than the model holds it (transformers fuses a mixture of experts'
        # per-expert files on load and splits them again on save): merged on the loaded model, as PEFT does
        return _new_folder(out_dir, lambda tmp: _merge_whole(state, cfg, source, trust_remote_code, tmp, tok))

    def write(tmp: Path) -> None:
        from safetensors import safe_open
        from safetensors.torch import save_file

        by_key = {key: owner for name, owner in owners.items() if (key := index.find(name, prefix)) is not None}
        # A trained copy of a weight the files hold once under another name (a tied output layer): written
        # under its own name, in the last file, and the tie undone in the config.
        untied = {name: owner for name, owner in owners.items()
                  if isinstance(owner, torch.Tensor) and index.find(name, prefix) is None}
        tmp.mkdir(parents=True)
        for path in files:
            tensors = {}
            with safe_open(str(path), framework="pt") as f:
                metadata = f.metadata() or {"format": "pt"}
                for key in f.keys():  # noqa: SIM118 - safe_open is not iterable
                    tensors[key] = _merged(f.get_tensor(key), by_key.get(key))
            if path == files[-1]:
                tensors.update({name: t.contiguous() for name, t in untied.items()})
            save_file(tensors, str(tmp / path.name), metadata=metadata)
            del tensors  # one file of the model in memory at a time
        for extra in folder.iterdir():
            if extra.is_file() and extra.suffix == ".json" and not extra.name.startswith("adapter_"):
                shutil.copy2(extra, tmp / extra.name)
        if untied:
            _untie(tmp, sorted(untied), files[-1].name)
        if tok is not None:
            tok.save_pretrained(tmp)

    return _new_folder(out_dir, write)


def _untie(folder: Path, names: list[str], last_file: str) -> None:
    """The merged folder's config without tied embeddings, and its index (if any) naming the new weights."""
    config = json.loads((folder / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        data = json.loads(index.read_text())
        data.setdefault("weight_map", {}).update({name: last_file for name in names})
        index.write_text(json.dumps(data, indent=2))


def _merge_owners(model: nn.Module) -> dict[str, object]:
    """Base weight name -> what replaces it: the LoRA layer that merges into it, or a trained copy's
    tensor (``modules_to_save``)."""
    from peft.tuners.lora import LoraLayer

    out: dict[str, object] = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            weight = getattr(module, "parameter_name", None)  # an expert weight PEFT adapts as a parameter
            out[lora.base_name(f"{name}.{weight}" if weight else f"{name}.base_layer.weight")] = module
    for name, param in model.named_parameters():
        if lora._TRAINED_COPY in clean_name(name):
            out[lora.base_name(name)] = param.detach()
    return out


def _merged(tensor: torch.Tensor, owner) -> torch.Tensor:
    if owner is None:
        return tensor
    if isinstance(owner, torch.Tensor):
        return owner.to(tensor.dtype).contiguous()
    base = owner.get_base_layer()
    weight = getattr(owner, "parameter_name", None) or "weight"
    setattr(base, weight, nn.Parameter(tensor, requires_grad=False))
    owner.merge(adapter_names=[lora.ADAPTER])
    out = getattr(base, weight).detach().contiguous()
    setattr(base, weight, nn.Parameter(torch.empty_like(tensor, device="meta"), requires_grad=False))  # freed
    owner.merged_adapters.clear()
    return out


def _merge_whole(state, cfg: LoraConfig, source: ModelSource, trust_remote_code: bool, tmp: Path, tok) -> None:
    """A base without safetensors files (``.bin``): loaded once, merged by PEFT, saved."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(source.path, trust_remote_code=trust_remote_code)
    model = get_peft_model(base, lora.peft_config(cfg, model=base), autocast_adapter_dtype=False)
    _with_values(model, state)
    model.merge_and_unload().save_pretrained(str(tmp), safe_serialization=True)
    if tok is not None:
        tok.save_pretrained(tmp)


def _new_folder(out_dir: Path, write) -> Path:
    """``write(tmp)`` then rename ``tmp`` to ``out_dir`` (to ``out_dir-<time>`` when that exists): an
    export is complete or absent, never half written under its name."""
    out_dir = out_dir.expanduser()
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    if out_dir.exists():
        out_dir = out_dir.with_name(f"{out_dir.name}-{int(time.time())}")
    tmp.rename(out_dir)
    return out_dir


def load_adapter(checkpoint: Path, cfg: LoraConfig, source: ModelSource) -> dict[str, torch.Tensor]:
    """The adapter's values by clean name from an adapters-only DCP checkpoint saved with the settings
    ``cfg`` on the base ``source``, in this process: only the adapter is read."""
    import torch.distributed.checkpoint as dcp

    shapes = adapter_names(skeleton(cfg, source, False))
    state = {"app": {"model": {name: torch.empty(shape) for name, shape in shapes.items()}}}
    dcp.load(state, checkpoint_id=str(checkpoint))
    return state["app"]["model"]
