"""A mixture-of-experts model trains with its router's load-balancing loss when its config (or
``model.router_aux_loss``) asks: the figure is transformers' own, it reaches the gradient times its
coefficient, and the language-model loss stays what it was. Tiny random Mixtral (sliding window shorter
than the examples) and Qwen3-MoE models written with ``save_pretrained``, loaded by the trainer's code."""

from __future__ import annotations

import importlib
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from trainer.data.rows import Example, collate, pack, pad_rows
from trainer.loop import train
from trainer.model import packed_sdpa, router_loss
from trainer.model.build import load_model
from trainer.model.source import ModelSource
from trainer.wire.config import ModelConfig, SettingError

VOCAB = 128
COMMON = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 128,
          "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
          "output_router_logits": True, "router_aux_loss_coef": 0.02}
FAMILIES = {
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16},
}
LENGTHS = (21, 19, 13, 27)  # two packed rows of exactly 40: no padding


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def moe(request, tmp_path_factory):
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(request.param, **COMMON, **FAMILIES[request.param])
                                     ).save_pretrained(folder)
    return request.param, load_model(ModelSource.resolve(str(folder)), ModelConfig(), seed=0, attn="sdpa").train()


@pytest.fixture(scope="module")
def examples() -> list[Example]:
    gen = torch.Generator().manual_seed(1)
    out = []
    for n in LENGTHS:
        ids = torch.randint(3, VOCAB, (n,), generator=gen).tolist()
        out.append(Example(ids, [-100] * 5 + ids[5:]))
    return out


def _router_logits(model, ids: torch.Tensor, **kwargs) -> tuple[torch.Tensor, ...]:
    return model(input_ids=ids, output_router_logits=True, **kwargs).router_logits


def _transformers_loss(model, router_logits: tuple[torch.Tensor, ...], padding: torch.Tensor | None) -> torch.Tensor:
    """The family's own ``load_balancing_loss_func``, called as its ``ForCausalLM.forward`` calls it."""
    module = importlib.import_module(type(model).__module__)
    return module.load_balancing_loss_func(router_logits, model.num_experts, model.num_experts_per_tok, padding)


def _reference(model, batch: dict, examples_alone: bool) -> torch.Tensor:
    """What transformers computes for these tokens: over the examples one by one (each alone, so no example
    sees another) for packed rows; over the padded batch with its padding mask otherwise."""
    with torch.no_grad():
        if not examples_alone:
            padding = router_loss.real_tokens(batch)
            return model(input_ids=batch["input_ids"], attention_mask=padding, output_router_logits=True).aux_loss
        alone = []  # per example: its router logits, one tensor per layer
        for row, ids in enumerate(batch["input_ids"]):
            cuts = (batch["position_ids"][row] == 0).nonzero().squeeze(1).tolist() + [ids.numel()]
            alone += [_router_logits(model, ids[start:end].unsqueeze(0))
                      for start, end in zip(cuts, cuts[1:], strict=False)]
        return _transformers_loss(model, tuple(torch.cat(layer) for layer in zip(*alone, strict=True)), None)


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("implementation", ["sdpa", packed_sdpa.NAME])  # the CPU default: per example
@pytest.mark.parametrize("packed", [True, False])
def test_the_router_loss_is_transformers_own_and_reaches_the_gradient_times_its_coefficient(moe, examples, packed,
                                                                                           implementation):
    family, model = moe
    packed_sdpa.register()
    model.config._attn_implementation = implementation  # each layer reads it at every forward
    rows = pack(examples, 40, 0) if packed else pad_rows(examples, 0)
    batch = collate(rows, 0)
    assert (batch["input_ids"].shape == (2, 40)) if packed else (batch["input_ids"].shape == (4, 27))
    labels = train.shifted_labels(batch, "cpu")
    weight = 0.02 / 3  # the coefficient over three micro-steps

    model.zero_grad(set_to_none=True)
    total_without, aux_without = train.micro_step(model, batch, labels, "cpu", 1.0)
    without = _grads(model)
    model.zero_grad(set_to_none=True)
    total_with, aux = train.micro_step(model, batch, labels, "cpu", 1.0, router_weight=weight)
    with_aux = _grads(model)

    assert aux_without is None and aux is not None
    torch.testing.assert_close(aux, _reference(model, batch, examples_alone=packed), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(total_with, total_without, rtol=1e-6, atol=0)  # the language-model loss as it was

    model.config._attn_implementation = "sdpa"  # the references: transformers' own masks
    model.zero_grad(set_to_none=True)  # the router loss's own gradient, by itself
    padding = None if packed else router_loss.real_tokens(batch)
    position_ids = batch["position_ids"] if packed else None
    model(input_ids=batch["input_ids"], position_ids=position_ids, attention_mask=padding,
          output_router_logits=True).aux_loss.backward()
    own = _grads(model)
    routers = [n for n in own if n.endswith("gate.weight") and "mlp" in n]
    assert routers, sorted(own)
    for name in routers:
        assert float((with_aux[name] - without[name]).abs().max()) > 0, name
        # float32 noise of the language-model part, which both runs compute alike, stays below 1e-6 of it
        torch.testing.assert_close(with_aux[name] - without[name], weight * own[name], rtol=1e-3,
                                   atol=1e-6 * float(without[name].abs().max()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_step_reports_the_mean_router_loss_of_its_micro_steps(moe, examples, one_rank):
    family, model = moe
    micro = [collate(pack(examples, 40, 0), 0), collate(pad_rows(examples, 0), 0)]
    want = sum(float(_reference(model, b, examples_alone=i == 0)) for i, b in enumerate(micro)) / 2
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    result = train.train_step(model, optimizer, scheduler, micro, "cpu", None, world=1)
    assert result.mean_router_aux_loss() == pytest.approx(want, rel=1e-5), family
    assert result.mean_loss() > 0 and result.real_tokens == 2 * sum(LENGTHS)


@pytest.mark.parametrize("asks, setting, expected", [
    (True, None, "router aux loss: on (0.02 x the load-balancing loss, as the model's config asks for it)"),
    (False, None, "router aux loss: off (the model's config asks for it: output_router_logits is false"),
    (False, True, "router aux loss: on (0.02 x the load-balancing loss, as model.router_aux_loss)"),
    (True, False, "router aux loss: off (model.router_aux_loss: false)"),
])
def test_the_setting_or_the_config_decides(asks, setting, expected):
    from transformers import MixtralConfig

    config = MixtralConfig(output_router_logits=asks, router_aux_loss_coef=0.02)
    coefficient, note = router_loss.choose(config, setting)
    assert note.startswith(expected)
    assert coefficient == (0.02 if expected.startswith("router aux loss: on") else None)
    model = torch.nn.Module()
    model.config = config
    assert router_loss.coefficient(model) == (0.02 if asks else None)  # the config's own, until kept
    router_loss.keep(model, coefficient)
    assert router_loss.coefficient(model) == coefficient


def test_a_model_without_a_router_has_no_router_loss_to_add():
    from transformers import LlamaConfig, MixtralConfig

    assert router_loss.choose(LlamaConfig(), None) == (None, None)
    with pytest.raises(SettingError, match="parameters.model.router_aux_loss: this model has no mixture-of-experts"):
        router_loss.choose(LlamaConfig(), True)
    with pytest.raises(SettingError, match="router_aux_loss_coef is 0.0"):
        router_loss.choose(MixtralConfig(router_aux_loss_coef=0.0), True)


def test_the_decision_stays_out_of_an_exported_config(tmp_path: Path):
    from transformers import MixtralConfig

    config = MixtralConfig(output_router_logits=False, router_aux_loss_coef=0.02)
    assert router_loss.choose(config, True)[0] == 0.02
    config.save_pretrained(tmp_path)
    assert '"output_router_logits": false' in (tmp_path / "config.json").read_text()


def test_validate_names_the_key_for_a_model_without_a_router(tiny_model_dir):
    import yaml

    from launcher.workload.validate import validate_text

    text = yaml.safe_dump({"experiment_name": "moe", "compute": {"accelerator_type": "CPU", "procs_per_node": 2,
                                                                 "num_accelerators": 2},
                           "parameters": {"model_name": str(tiny_model_dir), "dataset_name": "builtin:tiny-alpaca",
                                          "output_dir": "out", "model": {"router_aux_loss": True}}}, sort_keys=False)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.strip().startswith("router_aux_loss:"))
    errors = validate_text(text, "w.yaml").errors
    assert [(p.line, p.path) for p in errors] == [(line, "parameters.model.router_aux_loss")], errors
    assert "no mixture-of-experts router" in errors[0].message
