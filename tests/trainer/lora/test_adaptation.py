"""The run's adaptation is chosen in one place, from the parameters or a checkpoint's ``meta.json``, and
full fine-tuning is its null case: it adds nothing to the model, keeps the whole state, says nothing of
itself. Fast: no model is built (the LoRA runs themselves are ``test_lora_runs.py``'s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.trainer.run import tiny_params
from trainer.ckpt.checkpoint import AppState
from trainer.loop.state import TrainState
from trainer.lora import adaptation
from trainer.lora.adapters import Adapters, AdapterState
from trainer.model.build import BaseWeights
from trainer.wire.config import TrainerConfig


def _cfg(tmp_path: Path, **over) -> TrainerConfig:
    return TrainerConfig.model_validate(tiny_params(tmp_path, model={"from_scratch": False}, **over))


@pytest.mark.parametrize(("lora", "kind", "quantized"), [
    (None, adaptation.FullFineTune, False),
    ({"r": 4}, adaptation.Lora, False),
    ({"r": 4, "quantize": "nf4"}, adaptation.QLora, True),
], ids=["full", "lora", "qlora"])
def test_the_parameters_choose_the_adaptation(tmp_path: Path, lora, kind, quantized):
    adapted = adaptation.of(_cfg(tmp_path, **({"lora": lora} if lora else {})))
    assert type(adapted) is kind and (adapted.base_parameters(torch.nn.Linear(2, 2)) is None) is quantized
    assert isinstance(adapted.weights, Adapters if lora else BaseWeights)
    assert ("lora" in adapted.checkpoint_meta()) is bool(lora)
    assert (adapted.refusal(cuda=False) is not None) is quantized  # 4-bit needs CUDA


def test_full_fine_tuning_is_the_null_case(tmp_path: Path):
    adapted = adaptation.of(_cfg(tmp_path))
    net = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    app = adapted.app_state(net, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), TrainState())
    assert adapted.apply(net) is net and adapted.summary(net) is None and adapted.checkpoint_meta() == {}
    assert type(app) is AppState and set(app.state_dict()["model"]) == {"weight", "bias"}
    lora = adaptation.of(_cfg(tmp_path, lora={"r": 4}))
    assert type(lora.app_state(net, opt, app.scheduler, TrainState())) is AdapterState


def test_the_adaptation_says_which_parameters_are_the_base_s(tmp_path: Path):
    """What the memory prediction counts of the model as built: every parameter in full fine-tuning, the base's
    only with LoRA (its adapters and trained copies are the prediction's own count), none with QLoRA (its 4-bit
    base is counted from the config)."""
    net = torch.nn.ModuleDict({"q": torch.nn.Linear(2, 2), "lora_A": torch.nn.Linear(2, 1),
                               "modules_to_save": torch.nn.ModuleDict({"default": torch.nn.Linear(2, 2)})})
    counted = {kind: adaptation.of(_cfg(tmp_path, **over)).base_parameters(net) for kind, over in
               (("full", {}), ("lora", {"lora": {"r": 4}}), ("qlora", {"lora": {"r": 4, "quantize": "nf4"}}))}
    assert counted["full"] == list(net.parameters())
    assert counted["lora"] == list(net["q"].parameters()) and counted["qlora"] is None


@pytest.mark.parametrize(("meta", "kind"), [
    ({"model_name": "m", "lora": {"r": 4}}, adaptation.Lora),
    ({"model_name": "m"}, adaptation.FullFineTune),
    (None, adaptation.FullFineTune),  # no meta.json here (a bucket URL is read by the full export)
    ("not json", adaptation.FullFineTune),
], ids=["adapters", "whole", "no-meta", "unreadable"])
def test_a_checkpoint_says_which_adaptation_exports_it(tmp_path: Path, meta, kind):
    if meta is not None:
        (tmp_path / "meta.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    assert adaptation.of_checkpoint(str(tmp_path)) is kind
