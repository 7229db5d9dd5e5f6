"""The output layer on learned positions only: the same loss, gradients and evaluation as full logits,
for several output layers (untied, tied to the embeddings, soft-capped after the layer), and a correct
fallback for a model whose output layer the selection cannot go through."""

import pytest
import torch
from torch import nn

from tests.support.trainer.run import alpaca_examples
from trainer.data.rows import IGNORE, collate, pack
from trainer.loop import train
from trainer.model import learned_logits


@pytest.fixture(scope="module")
def batch(tiny_model_dir):
    """Two packed rows of prompt-masked alpaca examples: about half their positions learn nothing."""
    examples, pad_id = alpaca_examples(tiny_model_dir, 8, 96, mask_prompt=True)
    out = collate(pack(examples, 256, pad_id), pad_id)
    learned = int((train.shifted_labels(out, "cpu") != IGNORE).sum())
    assert 0 < learned < out["input_ids"].numel() * 0.6
    return out


def _tiny(kind: str):
    import transformers

    small = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
             "num_hidden_layers": 2, "vocab_size": 320}
    configs = {
        "llama": lambda: transformers.LlamaConfig(**small),
        "llama tied": lambda: transformers.LlamaConfig(**small, tie_word_embeddings=True),
        "gemma2 softcap": lambda: transformers.Gemma2Config(**small, head_dim=8, final_logit_softcapping=5.0,
                                                            query_pre_attn_scalar=8),
    }
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(configs[kind](), attn_implementation="eager", dtype=torch.float64)
    model.config.use_cache = False
    return model.train()


def _loss_and_grads(model, batch) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = float(train.micro_step(model, batch, train.shifted_labels(batch, "cpu"), "cpu", 1.0)[0])
    return loss, {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_same(got: tuple[float, dict], want: tuple[float, dict], rel: float, grad_rtol: float,
                 grad_atol: float | None = None) -> None:
    """Equal loss and gradients; ``grad_atol`` None: relative to each gradient's largest entry."""
    assert got[0] == pytest.approx(want[0], rel=rel)
    for name, grad in want[1].items():
        atol = grad_atol if grad_atol is not None else 1e-12 * float(grad.abs().max())
        torch.testing.assert_close(got[1][name], grad, rtol=grad_rtol, atol=atol, msg=name)


def _full_loss_and_grads(model, batch) -> tuple[float, dict[str, torch.Tensor]]:
    """The reference: every position's logits, cross-entropy ignoring unlearned labels."""
    model.zero_grad(set_to_none=True)
    total, _ = train.loss_sum(train.forward_logits(model, batch, "cpu"), train.shifted_labels(batch, "cpu"))
    total.backward()
    return float(total.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind", ["llama", "llama tied", "gemma2 softcap"])
def test_learned_positions_only_give_the_full_logits_loss_and_gradients(batch, kind):
    model = _tiny(kind)
    full = _full_loss_and_grads(model, batch)
    assert learned_logits.install(model)
    calls = []
    model.get_output_embeddings().register_forward_hook(lambda m, a, out: calls.append(tuple(out.shape)))
    got = _loss_and_grads(model, batch)
    learned = int((train.shifted_labels(batch, "cpu") != IGNORE).sum())
    assert calls == [(learned, 320)]  # the output layer ran once, on the learned positions only
    _assert_same(got, full, rel=1e-6, grad_rtol=1e-9)  # the loss is summed in fp32


def test_evaluation_matches_full_logits(batch, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "all_reduce", lambda t, *a, **k: t)  # one process: the sum is itself
    model = _tiny("llama")
    with torch.no_grad():
        pred = train.forward_logits(model, batch, "cpu")[:, :-1].argmax(-1)
    # the first row's answers become the model's own greedy predictions: that row is exactly right
    batch = {**batch, "labels": batch["labels"].clone()}
    learned = train.shifted_labels(batch, "cpu") != IGNORE
    batch["labels"][0, 1:][learned[0]] = pred[0][learned[0]]
    labels = train.shifted_labels(batch, "cpu")
    with torch.no_grad():
        total, count = train.loss_sum(train.forward_logits(model, batch, "cpu"), labels)
    answered = ((pred == labels) | ~learned).all(-1) & learned.any(-1)
    assert bool(answered[0]) and not bool(answered.all())
    learned_logits.install(model)
    loss, exact = train.evaluate(model, [batch], "cpu", with_exact_match=True)
    assert loss == pytest.approx(float(total) / count, rel=1e-6)
    assert exact == pytest.approx(float(answered.sum()) / float(learned.any(-1).sum()))


def test_a_row_with_nothing_to_learn_costs_nothing_and_breaks_nothing(batch):
    model = _tiny("llama")
    learned_logits.install(model)
    empty = {**batch, "labels": torch.full_like(batch["labels"], IGNORE)}
    model.zero_grad(set_to_none=True)
    loss = train.micro_step(model, empty, train.shifted_labels(empty, "cpu"), "cpu", 1.0)[0]
    assert float(loss) == 0.0
    assert all(float(p.grad.abs().max()) == 0.0 for p in model.parameters() if p.grad is not None)


class _HeadTwice(nn.Module):
    """An output layer used twice in one forward (as a model with an extra prediction head might):
    the selection cannot apply, the full logits are computed instead."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(320, 16)
        self.head = nn.Linear(16, 320, bias=False)
        self.config = type("C", (), {"_attn_implementation": "sdpa"})()

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, position_ids, attention_mask=None):
        h = self.embed(input_ids)
        logits = self.head(h) + 0.5 * self.head(torch.tanh(h))
        return type("Out", (), {"logits": logits})()


def test_a_model_whose_output_layer_runs_twice_gets_its_full_logits_indexed(batch):
    torch.manual_seed(0)
    model = _HeadTwice()
    reference = _full_loss_and_grads(model, batch)
    assert learned_logits.install(model)
    _assert_same(_loss_and_grads(model, batch), reference, rel=1e-6, grad_rtol=1e-5, grad_atol=1e-7)


class _IndexesLogits(_HeadTwice):
    """A model that masks some vocabulary columns as ``logits[:, :, cols]`` after its output layer."""

    def forward(self, input_ids, position_ids, attention_mask=None):
        logits = self.head(self.embed(input_ids))
        logits[:, :, :3] = -1e4
        return type("Out", (), {"logits": logits})()


def test_a_model_that_indexes_its_logits_by_position_falls_back_once_and_for_good(batch):
    torch.manual_seed(0)
    model = _IndexesLogits()
    reference = _full_loss_and_grads(model, batch)
    assert learned_logits.install(model)
    calls = []
    model.head.register_forward_hook(lambda m, a, out: calls.append(out.dim()))
    for _ in range(2):
        _assert_same(_loss_and_grads(model, batch), reference, rel=1e-6, grad_rtol=1e-5, grad_atol=1e-7)
    assert calls == [2, 3, 3]  # tried once with learned rows, then full logits on every step


def test_a_model_without_an_output_layer_is_left_as_it_is():
    assert learned_logits.install(nn.Linear(2, 2)) is False


def _other(kind: str):
    import transformers

    attn = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 320}
    return {
        "qwen2": lambda: transformers.Qwen2Config(**attn, intermediate_size=64, num_key_value_heads=2),
        "gpt_neox": lambda: transformers.GPTNeoXConfig(**attn, intermediate_size=64),
        "phi3": lambda: transformers.Phi3Config(**attn, intermediate_size=64, num_key_value_heads=2, pad_token_id=0),
        "gpt2": lambda: transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=320),
        "bloom": lambda: transformers.BloomConfig(hidden_size=32, n_layer=2, n_head=4, vocab_size=320),
        "opt": lambda: transformers.OPTConfig(**attn, ffn_dim=64, word_embed_proj_dim=32),
        "falcon": lambda: transformers.FalconConfig(**attn),
        "cohere (logit scale)": lambda: transformers.CohereConfig(**attn, intermediate_size=64, num_key_value_heads=2),
    }[kind]()


@pytest.mark.parametrize("kind", ["qwen2", "gpt_neox", "phi3", "gpt2", "bloom", "opt", "falcon", "cohere (logit scale)"])
def test_other_architectures_run_their_output_layer_once_on_learned_positions(kind):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_other(kind), attn_implementation="eager").eval()  # no dropout
    ids = torch.randint(3, 320, (2, 24), generator=torch.Generator().manual_seed(0))
    labels_in = ids.clone()
    labels_in[:, :10] = IGNORE
    batch = {"input_ids": ids, "labels": labels_in, "position_ids": torch.arange(24).repeat(2, 1)}
    labels = train.shifted_labels(batch, "cpu")
    with torch.no_grad():
        reference, count = train.loss_sum(train.forward_logits(model, batch, "cpu"), labels)
        assert learned_logits.install(model)
        calls = []
        model.get_output_embeddings().register_forward_hook(lambda m, a, out: calls.append(tuple(out.shape)))
        logits, targets = train.learned(model, batch, labels, "cpu")
    assert calls == [(count, 320)]
    loss = nn.functional.cross_entropy(logits.float(), targets, reduction="sum")
    assert float(loss) == pytest.approx(float(reference), rel=1e-6)
