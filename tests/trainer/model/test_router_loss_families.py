"""Every mixture-of-experts family of the installed transformers whose forward computes a router loss,
tiny and random (:mod:`tests.support.trainer.moe_families`): with the router loss asked for or not, a packed row
gives each example the logits it has alone, and the router loss is transformers' own for those tokens
(the family's forward on the examples one per row, padding masked). A family whose layers carry a state
along the sequence is not packed, and the run says why. One process, no download."""

from __future__ import annotations

import pytest
import torch

from tests.support.trainer.moe_families import moe_types, tiny_model
from trainer.data.rows import Example, collate, pack, pad_rows
from trainer.loop import train
from trainer.model import attention, packed_sdpa, router_loss
from trainer.model.build import attention_support
from trainer.model.source import ModelSource
from trainer.wire.config import ModelConfig, TrainerConfig

LENGTHS = (13, 9, 11)  # one packed row of 33 tokens, then padding
WIDTH = 40
LONG = (150, 70, 90)  # a row past packed_sdpa.MIN_ROW_LENGTH: sdpa once per example
PER_EXAMPLE = {"mixtral", "phimoe", "qwen3_moe"}
"""Families also run through sdpa once per example (costly on CPU at these lengths): a window passed to the
attention function (Mixtral), one kept in the mask only (PhiMoE), none (Qwen3-MoE)."""


def _examples(lengths: tuple[int, ...], vocab: int) -> list[Example]:
    gen = torch.Generator().manual_seed(1)
    return [Example(ids := torch.randint(3, vocab, (n,), generator=gen).tolist(), [-100] * 3 + ids[3:])
            for n in lengths]


def _alone(model, examples: list[Example]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [model(input_ids=torch.tensor([ex.input_ids]), use_cache=False).logits[0] for ex in examples]


def _packed(model, examples: list[Example], width: int, with_router_loss: bool):
    batch = collate(pack(examples, width, 0), 0)
    assert batch["input_ids"].shape == (1, width) and int(batch["real_tokens"]) < width  # padding at the end
    with torch.no_grad():
        logits, aux = train._forward(model, batch, "cpu", None, with_router_loss)
    cuts = [0]
    for ex in examples:
        cuts.append(cuts[-1] + len(ex.input_ids))
    return [logits[0, a:b] for a, b in zip(cuts, cuts[1:], strict=False)], aux


def _reference_router_loss(model, examples: list[Example]) -> torch.Tensor:
    """The family's own forward on the examples one per row, right-padded, its padding masked."""
    batch = collate(pad_rows(examples, 0), 0)
    padding = router_loss.real_tokens(batch)
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=padding.long(), output_router_logits=True,
                     use_cache=False).aux_loss


class NotCausal(Exception):
    """The family's forward is not causal in this transformers: no example alone to compare with."""


def _causal(model, vocab: int) -> bool:
    model.config._attn_implementation = "eager"
    tokens = torch.randint(3, vocab, (1, 18), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        return torch.allclose(model(input_ids=tokens[:, :13]).logits, model(input_ids=tokens).logits[:, :13],
                              atol=1e-5, rtol=1e-5)


def _check(kind: str) -> list[str]:
    """What is wrong with ``kind`` (nothing: an empty list)."""
    model = tiny_model(kind).eval()  # PhiMoE routes at random in training: the same masks, another mixture
    support = attention_support(model.config, ModelSource.resolve(kind), ModelConfig())
    cfg = TrainerConfig.model_validate({"model_name": kind, "dataset_name": "d", "output_dir": "o"})
    choice = attention.choose(cfg, model.config.to_dict(), support, torch.device("cpu"))
    if not choice.packing:  # state-space or linear-attention layers: one example a row, and the run says why
        said = any(note.startswith("packing: off (") for note in choice.notes)
        return [] if said else [f"{kind}: not packed, and not said ({choice.notes})"]
    problems = []
    vocab = model.config.get_text_config().vocab_size
    if not _causal(model, vocab):
        raise NotCausal(f"{kind}: its own forward on one sequence lets a position see later ones")
    runs = [(model.config._attn_implementation, LENGTHS, WIDTH)]
    if support.sdpa and support.backend and kind in PER_EXAMPLE:
        runs.append((packed_sdpa.NAME, LONG, packed_sdpa.MIN_ROW_LENGTH + 64))
    for implementation, lengths, width in runs:
        examples = _examples(lengths, vocab)
        # the reference: transformers' eager attention, whose masks are always explicit (Doge's sdpa forward on
        # one example replaces the causal mask sdpa leaves implicit with its dynamic one: it attends ahead)
        model.config._attn_implementation = "eager"
        alone = _alone(model, examples)
        want = _reference_router_loss(model, examples)
        model.config._attn_implementation = implementation
        for asked in (False, True):
            pieces, aux = _packed(model, examples, width, asked)
            worst = max(float((a - b).abs().max()) for a, b in zip(pieces, alone, strict=True))
            if worst > 1e-5:
                problems.append(f"{kind} ({implementation}, router loss {'on' if asked else 'off'}): packed logits "
                                f"differ from each example alone by {worst:.2e}")
            if asked and (aux is None or not torch.allclose(aux, want, rtol=1e-5, atol=1e-6)):
                problems.append(f"{kind} ({implementation}): router loss {aux} where transformers gives {want}")
    return problems


@pytest.fixture
def one_thread():
    """One intra-op thread: tiny matrices on a loaded 2-core machine wait on each other's threads (a family's
    check took 12.5 s with two threads there, 0.35 s with one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_packed_rows_are_exact_with_and_without_the_router_loss_for_every_moe_family(one_thread):
    packed_sdpa.register()
    kinds = moe_types()
    kinds = [k for k in kinds if f"{k}_text" not in kinds]  # a multimodal family: its text model
    assert {"mixtral", "qwen3_moe", "gpt_oss", "granitemoe", "olmoe", "phimoe", "qwen2_moe"} <= set(kinds)
    problems, unbuilt, checked, not_causal = [], [], [], []
    for kind in kinds:
        try:
            problems += _check(kind)
            checked.append(kind)
        except NotCausal as err:
            not_causal.append(str(err))
        except (TypeError, ValueError, AttributeError, IndexError, RuntimeError) as err:
            unbuilt.append(f"{kind}: {type(err).__name__}: {str(err).splitlines()[0][:120]}")
    assert problems == [], problems
    assert len(checked) >= 20, (checked, unbuilt)  # the families a tiny default config builds for
    print(f"checked {len(checked)} families: {', '.join(checked)}; not causal: {not_causal}; not built tiny "
          f"here: {unbuilt}")
