"""Formats, prompt masking, padding and packing, tested on real tokenizer and model (one process)."""

import json

import pytest
import torch

from trainer.data.rows import (
    IGNORE,
    Example,
    GlobalOrder,
    Tokenize,
    collate,
    needs_segment_mask,
    pack,
    pad_rows,
)
from trainer.loop import train
from trainer.model.packed_masks import segment_mask


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    return m.eval()


def test_alpaca_prompt_is_masked_and_answer_learned(tok):
    ex = Tokenize(tok, "alpaca", 256, mask_prompt=True)({"instruction": "Reverse the letters.", "input": "abc",
                                                         "output": "cba"})
    learned = [t for t, lab in zip(ex.input_ids, ex.labels, strict=True) if lab != IGNORE]
    assert tok.decode(learned) == "cba" + tok.eos_token
    prompt_len = ex.labels.index(next(lab for lab in ex.labels if lab != IGNORE))
    assert tok.decode(ex.input_ids[:prompt_len]).endswith("### Response:\n")
    assert ex.input_ids[0] == tok.bos_token_id


def test_unmasked_prompt_is_learned(tok):
    ex = Tokenize(tok, "alpaca", 256, mask_prompt=False)({"instruction": "x", "output": "y"})
    assert ex.labels == ex.input_ids


def test_squad_answer_only(tok):
    ex = Tokenize(tok, "squad", 256, True)({"context": "Paris is in France.", "question": "Where is Paris?",
                                            "answers": {"text": ["France"], "answer_start": [12]}})
    learned = [t for t, lab in zip(ex.input_ids, ex.labels, strict=True) if lab != IGNORE]
    assert tok.decode(learned) == "France" + tok.eos_token


def test_chat_learns_only_assistant_turns(tok):
    ex = Tokenize(tok, "chat", 256, True)({"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"}, {"role": "assistant", "content": "bye"}]})
    learned = tok.decode([t for t, lab in zip(ex.input_ids, ex.labels, strict=True) if lab != IGNORE])
    assert "hello" in learned and "bye" in learned and "hi" not in learned and "again" not in learned


def test_padding_is_never_learned_nor_counted(tok):
    exs = [Example([1, 5, 6], [IGNORE, 5, 6]), Example([1, 7], [IGNORE, 7])]
    batch = collate(pad_rows(exs, tok.pad_token_id), tok.pad_token_id)
    assert batch["input_ids"][1].tolist() == [1, 7, tok.pad_token_id]
    assert batch["labels"][1].tolist() == [IGNORE, 7, IGNORE]
    assert int(batch["real_tokens"]) == 5
    rows = pack(exs, 8, tok.pad_token_id)
    assert len(rows) == 1 and rows[0]["labels"].tolist()[5:] == [IGNORE] * 3
    assert rows[0]["position_ids"].tolist() == [0, 1, 2, 0, 1, 2, 3, 4]  # padding continues its row
    assert batch["position_ids"].tolist() == [[0, 1, 2], [0, 1, 2]]
    assert int(rows[0]["real_tokens"]) == 5


def test_packed_loss_equals_token_weighted_loss_of_examples(tok, model):
    with open("trainer/data/tiny_alpaca.jsonl") as f:
        rows = [json.loads(line) for line in f.readlines()[:12]]
    t = Tokenize(tok, "alpaca", 128, True)
    examples = [t(r) for r in rows]
    packed = pack(examples, 128, tok.pad_token_id)
    assert len(packed) < len(examples)  # several examples share rows
    with torch.no_grad():
        batch = collate(packed, tok.pad_token_id)
        total, count = train.loss_sum(train.forward_logits(model, batch, "cpu"), train.shifted_labels(batch, "cpu"))
        packed_loss = total / count
        sums, counts = 0.0, 0
        for ex in examples:
            one = collate(pad_rows([ex], tok.pad_token_id), tok.pad_token_id)
            s, n = train.loss_sum(train.forward_logits(model, one, "cpu"), train.shifted_labels(one, "cpu"))
            sums, counts = sums + float(s), counts + n
    assert count == counts
    assert float(packed_loss) == pytest.approx(sums / counts, rel=1e-5)


def test_unpacked_batches_skip_the_mask_and_lose_nothing(tok, model):
    """Rows of one example plus trailing padding need only causal attention (flash kernel on GPU);
    the loss is the one the explicit block mask gives. Packed rows keep the mask."""
    exs = [Example([1, 5, 6, 9, 4], [IGNORE, IGNORE, 6, 9, 4]), Example([1, 7], [IGNORE, 7])]
    padded = collate(pad_rows(exs, tok.pad_token_id), tok.pad_token_id)
    packed = collate(pack(exs, 8, tok.pad_token_id), tok.pad_token_id)
    assert not needs_segment_mask(padded) and needs_segment_mask(packed)
    with torch.no_grad():
        labels = train.shifted_labels(padded, "cpu")
        auto, _ = train.loss_sum(train.forward_logits(model, padded, "cpu"), labels)
        logits = model(input_ids=padded["input_ids"], position_ids=padded["position_ids"],
                       attention_mask=segment_mask(padded["position_ids"])).logits
        masked, _ = train.loss_sum(logits, labels)
    assert float(auto) == pytest.approx(float(masked), rel=1e-5)


def test_global_order_is_deterministic_and_resumable_across_world_sizes():
    two = [GlobalOrder(100, 2, r, 4, seed=3, shuffle=True) for r in range(2)]
    seen = [i for g in range(two[0].batches_per_epoch) for o in two for i in o.indices(0, g)]
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 96
    assert two[0].indices(1, 0) != two[0].indices(0, 0)
    four = [GlobalOrder(100, 4, r, 2, seed=3, shuffle=True) for r in range(4)]
    pos = GlobalOrder.rescale(5, two[0].per_global, four[0].per_global)
    assert [i for o in four for i in o.indices(0, pos)] == [i for o in two for i in o.indices(0, 5)]


@pytest.mark.parametrize("fmt, mask", [("alpaca", True), ("alpaca", False), ("squad", True)])
def test_batched_tokenization_gives_the_same_examples(tok, fmt, mask):
    if fmt == "alpaca":
        with open("trainer/data/tiny_alpaca.jsonl") as f:
            rows = [json.loads(line) for line in f.readlines()[:20]]
    else:
        rows = [{"context": f"The sky is blue {i}.", "question": "What colour?", "answers": {"text": ["blue"]}}
                for i in range(5)]
    t = Tokenize(tok, fmt, 24, mask)
    assert t.many(rows) == [t(r) for r in rows]


def _layer_masks(model, batch) -> list:
    """The ``attention_mask`` each decoder layer's attention receives for ``batch`` (the trainer's forward)."""
    seen = []
    use_cache, model.config.use_cache = model.config.use_cache, False  # as the trainer runs it
    hooks = [layer.self_attn.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw.get("attention_mask")),
                                                       with_kwargs=True) for layer in model.model.layers]
    try:
        with torch.no_grad():
            train.forward_logits(model, batch, "cpu")
    finally:
        for hook in hooks:
            hook.remove()
        model.config.use_cache = use_cache
    return seen


def test_rows_of_unequal_length_reach_the_layers_without_a_mask(tok, model):
    """Padding that continues its row's positions is no example boundary: transformers sees plain
    causal rows (no 4-D mask: the flash kernel on a GPU, no device check per forward); packed rows,
    padded too, still get their block mask."""
    exs = [Example(list(range(1, 13)), [IGNORE] + list(range(2, 13))), Example(list(range(1, 8)), [IGNORE] * 7)]
    exs[1].labels[3:] = exs[1].input_ids[3:]
    padded = collate(pad_rows(exs, tok.pad_token_id), tok.pad_token_id)
    masks = _layer_masks(model, padded)
    assert len(masks) == len(model.model.layers) and all(m is None for m in masks), masks
    packed = collate(pack([*exs, Example([1, 9, 8], [IGNORE, 9, 8])], 24, tok.pad_token_id), tok.pad_token_id)
    assert all(m is not None for m in _layer_masks(model, packed))
