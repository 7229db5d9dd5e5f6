"""Packing is exact for every attention implementation that runs here: the gradients of a packed batch
equal the summed gradients of its examples run one by one, and settings a model cannot take are refused
or turned off with a reason."""

import pytest
import torch

from tests.support.trainer.run import alpaca_examples
from trainer.data.rows import collate, pack, pad_rows
from trainer.loop import train
from trainer.model import attention, packed_masks, packed_sdpa
from trainer.wire.config import TrainerConfig


@pytest.fixture(scope="module")
def examples(tiny_model_dir):
    return alpaca_examples(tiny_model_dir, 10, 96, mask_prompt=False)


def _model(model_dir, implementation: str):
    from transformers import AutoModelForCausalLM

    packed_sdpa.register()
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=implementation,
                                                 dtype=torch.float64)
    model.config.use_cache = False
    assert model.config._attn_implementation == implementation
    return model.train()


def _grads(model, batches, pad_id) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = 0.0
    for rows in batches:  # as the training step runs each micro-batch
        batch = collate(rows, pad_id)
        loss += float(train.micro_step(model, batch, train.shifted_labels(batch, "cpu"), "cpu", 1.0)[0])
    # names as in the model without activation checkpointing's wrappers
    return loss, {n.replace("._checkpoint_wrapped_module", ""): p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("implementation, row", [
    ("sdpa", 256), ("eager", 256),
    (packed_sdpa.NAME, 256),  # once per example
    (packed_sdpa.NAME, 128),  # rows too short for that: the segment mask
])
def test_packed_gradients_equal_one_by_one(tiny_model_dir, examples, implementation, row):
    exs, pad_id = examples
    packed = pack(exs, row, pad_id)
    assert len(packed) < len(exs) and max(len(r["lengths"]) for r in packed) >= 2
    assert collate(packed, pad_id)["input_ids"].shape[1] == row
    model = _model(tiny_model_dir, implementation)
    loss_packed, grads_packed = _grads(model, [packed], pad_id)
    loss_single, grads_single = _grads(model, [pad_rows([ex], pad_id) for ex in exs], pad_id)
    assert loss_packed == pytest.approx(loss_single, rel=1e-6)  # the loss is summed in fp32
    # float64 throughout, but transformers' eager attention takes its softmax in float32: a sum over a
    # longer row rounds differently (seen with one thread). A leak between examples is orders above both.
    tol = 1e-7 if implementation == "eager" else 1e-12
    for name, grad in grads_single.items():
        torch.testing.assert_close(grads_packed[name], grad, rtol=tol * 1000, atol=tol * float(grad.abs().max()),
                                   msg=name)


def test_per_example_sdpa_recomputes_the_same_examples_under_activation_checkpointing(tiny_model_dir, examples):
    """Checkpointed blocks run their forward again during backward, after the forward pass returned:
    the recomputed attention must still see each example on its own."""
    from trainer.model.build import apply_activation_checkpointing

    exs, pad_id = examples
    model = _model(tiny_model_dir, packed_sdpa.NAME)
    loss_single, grads_single = _grads(model, [pad_rows([ex], pad_id) for ex in exs], pad_id)
    apply_activation_checkpointing(model.model, "full")
    loss_packed, grads_packed = _grads(model, [pack(exs, 256, pad_id)], pad_id)
    assert loss_packed == pytest.approx(loss_single, rel=1e-6)
    for name, grad in grads_single.items():
        torch.testing.assert_close(grads_packed[name], grad, rtol=1e-9, atol=1e-12 * float(grad.abs().max()),
                                   msg=name)


def test_per_example_sdpa_finds_each_example_and_is_plain_sdpa_outside_a_packed_batch(tiny_model_dir):
    pos = torch.tensor([[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5]])
    assert packed_sdpa.spans(pos) == [[(0, 3), (3, 5), (5, 6)], [(0, 6)]]
    assert packed_sdpa.spans(torch.tensor([[3, 4, 0, 1]])) == [[(0, 2), (2, 4)]]  # a row cut mid-example
    model = _model(tiny_model_dir, packed_sdpa.NAME)
    reference = _model(tiny_model_dir, "sdpa")
    ids = torch.tensor([[5, 9, 13, 21, 7, 30]])
    with torch.no_grad():  # without the examples' spans it is causal attention over the row
        torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits)
        pos = torch.tensor([[0, 1, 2, 0, 1, 2]])
        with packed_sdpa.examples(pos):  # with them, the second example does not see the first
            packed = model(input_ids=ids, position_ids=pos).logits
        torch.testing.assert_close(packed[:, 3:], reference(input_ids=ids[:, 3:]).logits)
        torch.testing.assert_close(packed[:, :3], reference(input_ids=ids[:, :3]).logits)


def test_a_model_whose_attention_does_not_come_through_the_interface_is_refused(tiny_model_dir):
    model = _model(tiny_model_dir, "eager")  # its own attention code: the examples' spans are never read
    pos = torch.tensor([[0, 1, 2, 0, 1, 2]])
    with pytest.raises(packed_sdpa.NotRouted, match="model.attention: sdpa"), packed_sdpa.examples(pos):
        model(input_ids=torch.tensor([[5, 9, 13, 21, 7, 30]]), position_ids=pos)


def _tiny(kind: str):
    import transformers

    common = {"vocab_size": 320, "num_hidden_layers": 2}
    return {
        "qwen2": lambda: transformers.Qwen2Config(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                                  num_key_value_heads=2, **common),
        "gpt_neox": lambda: transformers.GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                                       **common),
        "phi3": lambda: transformers.Phi3Config(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                                num_key_value_heads=2, pad_token_id=0, **common),
        "gpt2": lambda: transformers.GPT2Config(vocab_size=320, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                                embd_pdrop=0.0, attn_pdrop=0.0),  # absolute positions
    }[kind]()


@pytest.mark.parametrize("kind", ["qwen2", "gpt_neox", "phi3", "gpt2"])
def test_per_example_sdpa_is_exact_for_other_architectures(examples, kind):
    from transformers import AutoModelForCausalLM

    exs, pad_id = examples
    packed_sdpa.register()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_tiny(kind), attn_implementation=packed_sdpa.NAME,
                                             dtype=torch.float64).train()
    model.config.use_cache = False
    loss_packed, grads_packed = _grads(model, [pack(exs, 256, pad_id)], pad_id)
    loss_single, grads_single = _grads(model, [pad_rows([ex], pad_id) for ex in exs], pad_id)
    assert loss_packed == pytest.approx(loss_single, rel=1e-6)
    for name, grad in grads_single.items():
        torch.testing.assert_close(grads_packed[name], grad, rtol=1e-9, atol=1e-12 * float(grad.abs().max()),
                                   msg=name)


def test_per_example_sdpa_keeps_a_sliding_window_inside_each_example(examples):
    """A Mistral-shaped model whose window (8) is shorter than the examples: packed per example equals
    one by one (where the window cuts each example's attention the same way)."""
    from transformers import AutoModelForCausalLM, MistralConfig

    exs, pad_id = examples
    packed_sdpa.register()
    config = MistralConfig(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                           max_position_embeddings=256)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=packed_sdpa.NAME, dtype=torch.float64)
    model.config.use_cache = False
    model.train()
    packed = pack(exs, 256, pad_id)
    assert max(max(r["lengths"]) for r in packed) > 8
    loss_packed, grads_packed = _grads(model, [packed], pad_id)
    model.config._attn_implementation = "sdpa"  # one by one through HF's own sliding-window mask
    loss_single, grads_single = _grads(model, [pad_rows([ex], pad_id) for ex in exs], pad_id)
    assert loss_packed == pytest.approx(loss_single, rel=1e-6)
    for name, grad in grads_single.items():
        torch.testing.assert_close(grads_packed[name], grad, rtol=1e-9, atol=1e-12 * float(grad.abs().max()),
                                   msg=name)


def test_per_example_sdpa_hands_extras_it_cannot_apply_to_sdpa_with_the_examples_mask():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(1, 4, 6, 6, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 0, 1]])
    module = torch.nn.Module()
    with packed_sdpa.examples(pos):
        got, _ = packed_sdpa.attention(module, q, k, v, None, position_bias=bias)
    want, _ = sdpa_attention_forward(module, q, k, v, packed_masks.segment_mask(pos), position_bias=bias)
    torch.testing.assert_close(got, want)


def test_eager_mask_is_additive_and_closes_other_examples():
    pos = torch.tensor([[0, 1, 2, 0, 1]])
    mask = packed_masks.additive_mask(pos)
    assert mask.dtype == torch.float32
    allowed = mask[0, 0] == 0
    assert allowed.tolist() == [[True, False, False, False, False],
                                [True, True, False, False, False],
                                [True, True, True, False, False],
                                [False, False, False, True, False],
                                [False, False, False, True, True]]
    assert torch.isfinite(mask).all() and float(mask.min()) == torch.finfo(torch.float32).min


def _cfg(**over) -> TrainerConfig:
    return TrainerConfig.model_validate({"model_name": "m", "dataset_name": "d", "output_dir": "o", **over})


BLOOM = {"model_type": "bloom"}
LLAMA = {"model_type": "llama"}
CPU = torch.device("cpu")


@pytest.mark.parametrize("params, config, sdpa, expected", [
    ({}, LLAMA, True, ("sdpa", True, ("attention: sdpa",))),
    ({}, BLOOM, False, ("eager", False, ("attention: eager (the model has no sdpa implementation)",
                                         "packing: off (BLOOM uses ALiBi without position ids: packed examples "
                                         "would attend to each other)"))),
    ({"data": {"packing": False}}, BLOOM, False, ("eager", False, ("attention: eager (the model has no sdpa "
                                                                  "implementation)",))),
    ({"model": {"attention": "eager"}}, LLAMA, True, ("eager", True, ())),
])
def test_defaults_fit_the_model(params, config, sdpa, expected):
    choice = attention.choose(_cfg(**params), config, attention.AttentionSupport(sdpa, True), CPU)
    assert (choice.implementation, choice.packing, choice.notes) == expected
    assert not choice.per_example  # the model's attention does not go through HF's interface


@pytest.mark.parametrize("params, device, per_example", [
    ({}, CPU, True),
    ({"model": {"attention": "sdpa"}}, CPU, False),  # asked for by name: sdpa with the mask
    ({"max_seq_len": 128}, CPU, False),  # short rows: cheaper through the mask
    ({"data": {"packing": False}}, CPU, False),  # one example per row: the row is the example
    ({"model": {"attention": "eager"}}, CPU, False),
    ({}, torch.device("cuda"), False),  # GPUs keep their masked kernels (not measured per example here)
])
def test_packed_rows_on_cpu_take_sdpa_once_per_example(params, device, per_example):
    choice = attention.choose(_cfg(**params), LLAMA, attention.AttentionSupport(True, True, backend=True), device)
    assert choice.per_example is per_example
    assert (choice.hf_name == packed_sdpa.NAME) is per_example
    assert any("once per packed example" in note for note in choice.notes) is per_example


@pytest.mark.parametrize("params, config, sdpa, key", [
    ({"data": {"packing": True}}, BLOOM, False, "parameters.data.packing"),
    ({"model": {"attention": "flex"}}, LLAMA, True, "parameters.model.attention: flex attention trains on GPUs"),
    ({"model": {"attention": "sdpa"}}, BLOOM, False, "parameters.model.attention"),
])
def test_settings_the_model_cannot_take_are_refused(params, config, sdpa, key):
    with pytest.raises(attention.SettingError, match=key):
        attention.choose(_cfg(**params), config, attention.AttentionSupport(sdpa, True), CPU)


def test_first_fit_decreasing_fills_rows_and_is_deterministic(examples):
    from trainer.data.rows import Example

    lengths = [7, 3, 5, 2, 6, 4, 1, 8, 2, 5]
    exs = [Example(list(range(1, n + 1)), list(range(1, n + 1))) for n in lengths]
    rows = pack(exs, 10, 0)
    assert sum(int(r["real_tokens"]) for r in rows) == sum(lengths)
    assert len(rows) == 5  # 43 tokens in rows of 10: the fewest possible
    again = pack(exs, 10, 0)
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(rows, again, strict=True))
