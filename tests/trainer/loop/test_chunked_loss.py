"""The loss without the logits (``model.cross_entropy``): the chunked cross-entropy gives today's loss and
gradients (1e-6 in fp32) for every family of the packing test (``PACKED``), with tied embeddings, Gemma's
soft-capping, Cohere's and Granite's scales, LoRA on the output layer and a trained copy of it, every
mixture-of-experts family trained with its router loss; evaluation's loss and predictions too. A model that changes its logits some other way keeps the full logits, said once.

The families are tiny random models built from their configs (no weights to read); the micro-batch is two
packed rows with prompts masked, and a chunk holds 7 positions so that every micro-batch runs several chunks
and a last, shorter one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.support.trainer.packed_families import COMMON, PACKED, VOCAB
from trainer.data.rows import IGNORE, Example, collate, pack, pad_rows
from trainer.loop import loss, train
from trainer.model import learned_logits
from trainer.wire.config import SettingError
from trainer.wire.cross_entropy import LogitMap, chunk_rows, chunks, logit_map, logits_rows

ROWS = 7
VARIANTS = {  # name -> (model_type, what differs from COMMON and PACKED[model_type])
    **{t: (t, {}) for t in PACKED},
    "llama-tied": ("llama", {"tie_word_embeddings": True}),
    "gemma2-softcap-2": ("gemma2", {"final_logit_softcapping": 2.0}),  # 30 barely bends these tiny logits
    "gemma3_text-tied-softcap": ("gemma3_text", {"tie_word_embeddings": True, "final_logit_softcapping": 3.0}),
    "cohere-tied-scale": ("cohere", {"tie_word_embeddings": True, "logit_scale": 0.25}),
    "cohere2-scale": ("cohere2", {"logit_scale": 0.5}),
    "granite-scaling": ("granite", {"logits_scaling": 4.0}),
    "qwen2-bias-free-tied": ("qwen2", {"tie_word_embeddings": True}),
}


def _model(model_type: str, overrides: dict, attn: str = "eager"):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **{**COMMON, **PACKED[model_type], **overrides})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    learned_logits.install(model)  # as the trainer builds it: the full path takes learned positions only
    return model


@pytest.fixture(scope="module")
def batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    examples = []
    for n, prompt in ((21, 5), (17, 0), (13, 6), (9, 3)):
        ids = torch.randint(3, VOCAB, (n,), generator=gen).tolist()
        examples.append(Example(ids, [IGNORE] * prompt + ids[prompt:]))
    return collate(pack(examples, 40, 0), 0)


def _choice(model, setting: str = "chunked", rows: int = ROWS) -> loss.LossChoice:
    chosen = loss.choose(setting, model.config.to_dict(), 2, 40, cuda=False)
    return loss.LossChoice(chosen.setting, chosen.vocab, rows, chosen.mapping, chosen.note)


def _step(model, batch, choice: loss.LossChoice | None, device: str = "cpu",
          router_weight: float | None = None) -> tuple[float, dict[str, torch.Tensor], float | None]:
    """The mean loss of one micro-step, every gradient (the loss scaled as training scales it) and the router
    loss (with ``router_weight``)."""
    model.zero_grad(set_to_none=True)
    if choice is not None:
        loss.keep(model, choice)
    labels = train.shifted_labels(batch, "cpu")
    count = int((labels != IGNORE).sum())
    torch.manual_seed(1)  # the same dropout in both
    total, aux = train.micro_step(model, batch, labels, device, 1.0 / count, router_weight)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(total) / count, grads, None if aux is None else float(aux)


def _assert_same(full: tuple, chunked: tuple, name: str) -> None:
    assert abs(full[0] - chunked[0]) <= 1e-6 * max(1.0, abs(full[0])), (name, full[0], chunked[0])  # float32 sums
    assert full[1].keys() == chunked[1].keys() and full[1], name
    worst = {n: float((full[1][n] - chunked[1][n]).abs().max()) for n in full[1]}
    assert max(worst.values()) <= 1e-6, (name, max(worst.items(), key=lambda kv: kv[1]))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_chunked_loss_and_gradients_equal_the_full_logits(batch, name):
    model_type, overrides = VARIANTS[name]
    model = _model(model_type, overrides)
    full = _step(model, batch, None)
    calls = []
    head = model.get_output_embeddings()
    head.register_forward_hook(lambda module, args, out: calls.append(tuple(out.shape)))
    chunked = _step(model, batch, _choice(model))
    assert calls == [(1, 1, VOCAB)], calls  # the layer itself ran on the probe only: no full logits
    assert getattr(head, "_fsdp_tui_logit_map_checked", False) and not getattr(head, "_fsdp_tui_chunked_loss_off", False)
    _assert_same(full, chunked, name)


@pytest.mark.parametrize("targets, saved", [(["lm_head", "q_proj"], None), (["q_proj", "v_proj"], ["lm_head"])])
def test_chunked_loss_equals_the_full_logits_with_lora_on_the_output_layer(batch, targets, saved):
    from peft import get_peft_model

    from trainer.lora.adapters import peft_config
    from trainer.wire.config import LoraConfig

    model = get_peft_model(_model("llama", {"tie_word_embeddings": False}),
                           peft_config(LoraConfig(r=4, target_modules=targets, modules_to_save=saved)))
    for name, p in model.named_parameters():  # PEFT's B starts at zero: make the adapter's path count
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    learned_logits.install(model)
    full = _step(model, batch, None)
    chunked = _step(model, batch, _choice(model))
    assert any("lm_head" in n for n in full[1]), sorted(full[1])  # the output layer's own trainable weights
    _assert_same(full, chunked, f"lora {targets} {saved}")


def test_chunked_loss_equals_the_full_logits_with_the_router_loss_for_every_moe_family():
    """Every mixture-of-experts family that builds tiny here (:mod:`tests.support.trainer.moe_families`), trained with
    its router loss as the trainer trains it: the chunked step's loss, router loss and gradients are the full
    logits' (a family that computes its loss some other way keeps the full logits, and then they agree too)."""
    from tests.support.trainer.moe_families import moe_types, tiny_model

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only wait on each other
    try:
        kinds = [k for k in moe_types() if f"{k}_text" not in moe_types()]
        gen = torch.Generator().manual_seed(3)
        checked, unbuilt, in_chunks = [], [], []
        for kind in kinds:
            try:  # a family this transformers cannot build tiny, or whose own forward fails at this size
                model = tiny_model(kind)
                vocab = model.config.get_text_config().vocab_size
                examples = [Example(ids := torch.randint(3, vocab, (n,), generator=gen).tolist(),
                                    [IGNORE] * 3 + ids[3:]) for n in (13, 9, 11)]
                moe_batch = collate(pad_rows(examples, 0), 0)  # one example a row: state-space families too
                learned_logits.install(model)
                full = _step(model, moe_batch, None, router_weight=0.02)
            except (TypeError, ValueError, AttributeError, IndexError, RuntimeError) as err:
                unbuilt.append(f"{kind}: {type(err).__name__}")
                continue
            calls = []
            model.get_output_embeddings().register_forward_hook(lambda m, a, out, calls=calls: calls.append(tuple(out.shape)))
            chunked = _step(model, moe_batch, _choice(model), router_weight=0.02)
            if calls == [(1, 1, vocab)]:  # the output layer ran on the probe only: the loss went in chunks
                in_chunks.append(kind)
            _assert_same(full, chunked, kind)
            assert full[2] is not None and abs(full[2] - chunked[2]) <= 1e-6, (kind, full[2], chunked[2])
            checked.append(kind)
    finally:
        torch.set_num_threads(before)
    assert {"mixtral", "qwen3_moe", "gpt_oss", "granitemoe", "olmoe", "phimoe", "qwen2_moe"} <= set(checked), \
        (checked, unbuilt)
    assert len(checked) >= 20, (checked, unbuilt)
    assert {"mixtral", "qwen3_moe", "gpt_oss", "olmoe", "qwen2_moe"} <= set(in_chunks), (in_chunks, checked)
    print(f"checked {len(checked)} families, {len(in_chunks)} in chunks: {', '.join(in_chunks)}; full logits: "
          f"{sorted(set(checked) - set(in_chunks))}; not run tiny here: {unbuilt}")


def test_evaluation_loss_and_predictions_equal_the_full_logits(batch):
    model = _model("gemma2", {"final_logit_softcapping": 2.0}).eval()
    labels = train.shifted_labels(batch, "cpu")
    with torch.no_grad():
        full = train._learned_loss(model, batch, labels, "cpu", False, predictions=True)
        loss.keep(model, _choice(model))
        chunked = train._learned_loss(model, batch, labels, "cpu", False, predictions=True)
    assert chunked.returned is not None and chunked.returned.shape == (1, 1, VOCAB)
    assert abs(float(full.total) - float(chunked.total)) <= 1e-6 * float(full.total)
    assert torch.equal(full.predicted, chunked.predicted) and torch.equal(full.targets, chunked.targets)
    loss_full, _ = _eval(model, batch, None)
    loss_chunked, exact = _eval(model, batch, _choice(model))
    assert abs(loss_full - loss_chunked) <= 1e-6 and exact is not None


def _eval(model, batch, choice):
    import socket

    import torch.distributed as dist

    if choice is not None:
        loss.keep(model, choice)
    else:
        model.__dict__.pop("_fsdp_tui_cross_entropy", None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        return train.evaluate(model, [batch], "cpu", with_exact_match=True)
    finally:
        dist.destroy_process_group()  # the next test of this process starts its own


def test_a_model_whose_logits_the_map_does_not_describe_keeps_the_full_logits_said_once(batch, capsys):
    """Here the map says x 2 where the model does nothing: the first step's check finds it, the step is
    computed from the full logits, and so is every step after."""
    model = _model("llama", {})
    full = _step(model, batch, None)
    wrong = _choice(model)
    wrong = loss.LossChoice(wrong.setting, wrong.vocab, ROWS, LogitMap(multiply=2.0), wrong.note)
    again = _step(model, batch, wrong)
    _assert_same(full, again, "fallback")
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cross-entropy:")]
    assert said == ["cross-entropy: full logits from now on (Linear output: its logits are not its output layer's "
                    "x 2)"], said
    calls = []
    model.get_output_embeddings().register_forward_hook(lambda module, args, out: calls.append(tuple(out.shape)))
    _assert_same(full, _step(model, batch, wrong), "after the fallback")
    assert calls == [(int((train.shifted_labels(batch, "cpu") != IGNORE).sum()), VOCAB)]
    assert capsys.readouterr().out == ""


def test_a_model_that_runs_its_output_layer_twice_keeps_the_full_logits(batch, capsys):
    model = _model("llama", {})
    full = _step(model, batch, None)
    forward = model.forward

    def twice(*args, **kwargs):
        out = forward(*args, **kwargs)
        model.lm_head(torch.zeros(1, 1, COMMON["hidden_size"]))  # e.g. a second prediction head
        return out

    model.forward = twice
    _assert_same(full, _step(model, batch, _choice(model)), "twice")
    assert "its output layer ran 2 times in one forward" in capsys.readouterr().out


def test_choose_says_what_it_chose_and_refuses_fused_without_cuda():
    config = {"model_type": "llama", "vocab_size": 128256}
    auto = loss.choose("auto", config, 1, 4096, cuda=False)
    assert auto.rows == 65 and auto.note == (
        "cross-entropy: chunked (auto: a micro-batch's fp32 logits would be up to 2.0 GiB, 1 x 4096 positions x "
        "128,256 vocabulary; 65 positions a chunk, 32 MiB of fp32 logits; model.cross_entropy: full computes "
        "them whole)")
    small = loss.choose("auto", {"model_type": "llama", "vocab_size": 320}, 8, 128, cuda=False)
    assert small.note == "cross-entropy: full logits (auto: a micro-batch's are at most 1 MiB, one chunk's worth)"
    full = loss.choose("full", config, 2, 8192, cuda=False)
    assert full.note == "cross-entropy: full logits (model.cross_entropy: full; up to 7.8 GiB a micro-batch)"
    gemma = loss.choose("chunked", {"model_type": "gemma2", "vocab_size": 256000, "final_logit_softcapping": 30.0},
                        1, 64, cuda=False)
    assert gemma.note.endswith("; logits soft-capped at 30, as the model does"), gemma.note
    with pytest.raises(SettingError, match=r"^parameters\.model\.cross_entropy: fused needs CUDA and Liger Kernel on "
                                           r"every node \(this node has no GPU\)"):
        loss.choose("fused", config, 1, 4096, cuda=False)


@pytest.mark.parametrize("setting, positions, vocab, cuda, chunked, rows", [
    ("auto", 8192, 128256, False, True, 65),
    ("auto", 65, 128256, False, False, 65),  # one chunk's worth: computed whole
    ("auto", 66, 128256, False, True, 65),
    ("chunked", 10, 128256, False, True, 10),
    ("full", 8192, 128256, False, False, 8192),
    ("fused", 8192, 256000, False, True, 32),
    ("auto", 4096, 32000, False, True, 262),
    ("auto", 512, 128256, True, False, 512),  # on a GPU: chunks of 523 positions
    ("auto", 8192, 128256, True, True, 523),
])
def test_the_rule_the_trainer_and_the_memory_prediction_share(setting, positions, vocab, cuda, chunked, rows):
    assert chunks(setting, positions, vocab, cuda) is chunked
    assert logits_rows(setting, positions, vocab, cuda) == rows
    budget = 256 * 2**20 if cuda else 32 * 2**20
    assert chunk_rows(vocab, cuda) * 4 * vocab <= budget < (chunk_rows(vocab, cuda) + 1) * 4 * vocab


@pytest.mark.parametrize("config, mapping", [
    ({"model_type": "llama"}, LogitMap()),
    ({"model_type": "gemma2", "final_logit_softcapping": 30.0}, LogitMap(softcap=30.0)),
    ({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "final_logit_softcapping": None}}, LogitMap()),
    ({"model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text", "final_logit_softcapping": 30.0}},
     LogitMap(softcap=30.0)),
    ({"model_type": "cohere", "logit_scale": 0.0625}, LogitMap(multiply=0.0625)),
    ({"model_type": "granite", "logits_scaling": 8}, LogitMap(divide=8.0)),
    ({"model_type": "hyperclovax", "logits_scaling": 0.5}, LogitMap(multiply=0.5)),
    ({"model_type": "falcon_h1", "lm_head_multiplier": 0.03}, LogitMap(multiply=0.03)),
])
def test_logit_map_reads_what_each_family_does_to_its_logits(config, mapping):
    assert logit_map(config) == mapping


KNOWN = ("final_logit_softcapping", "logit_scale", "logits_scaling", "lm_head_multiplier")
"""Config values :func:`logit_map` reads."""
OTHERS = {"inkling_text": "cuts the padded vocabulary off its logits"}
"""Families that change their logits some other way: the first step's check sends them to the full logits."""
_CHANGE = re.compile(r"^\s*(lm_)?logits = (lm_)?logits\s*[-+*/]|self\.lm_head\(.*\)\s*[-+*/]|logit_softcap\(|"
                     r"logits = logits\[\.\.\., :")


def test_every_causal_lm_that_changes_its_logits_is_read_by_the_map():
    """Scans transformers' ``*ForCausalLM`` classes for statements that change the logits after the output layer:
    each class reads a config value the map knows, or its family is one of ``OTHERS``."""
    import transformers
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    models = Path(transformers.__file__).parent / "models"
    unread: dict[str, list[str]] = {}
    changing = set()
    for model_type, name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        module = model_type_to_module_name(model_type)
        source = models / module / f"modeling_{module}.py"
        if not source.is_file():
            continue
        found = re.search(rf"^class {name}\b.*?(?=^class |\Z)", source.read_text(encoding="utf-8"), re.M | re.S)
        if found is None:
            continue
        body = found.group(0)
        changes = [line.strip() for line in body.splitlines() if _CHANGE.search(line)]
        if changes:
            changing.add(model_type)
            if not any(key in body for key in KNOWN) and model_type not in OTHERS:
                unread[model_type] = changes
    assert {"gemma2", "cohere", "granite", "falcon_h1", "gemma3n_text"} <= changing  # the scan finds what it looks for
    assert not unread, unread
    assert set(OTHERS) <= changing, set(OTHERS) - changing  # no stale entry


@pytest.mark.slow
def test_under_fsdp_and_replication_chunks_and_checkpointing_give_the_same_loss_and_gradients(tmp_path, tiny_model_dir):
    """Two ranks (gloo): for plain replication, FSDP with every block in the root unit and FSDP with a unit per
    block, the chunked loss gives the full logits' loss and reduced gradients; activation checkpointing
    (``selective``: every other block, ``full``: every block) gives the same as ``off``."""
    import subprocess

    from tests.support.trainer.run import HERE, ROOT, torchrun_argv, trainer_env

    configs = [f"{s}:{ce}:off" for s in ("no_shard", "full_shard", "full_shard_blocks") for ce in ("full", "chunked")]
    configs += ["full_shard_blocks:full:selective", "full_shard_blocks:chunked:selective",
                "full_shard_blocks:chunked:full", "no_shard:full:selective"]
    prefix = tmp_path / "step"
    script = str(HERE / "chunked_worker.py")
    out = subprocess.run(torchrun_argv(2, script, str(tiny_model_dir), str(prefix), *configs), cwd=ROOT,
                         env=trainer_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = {c: torch.load(f"{prefix}-{c.replace(':', '-')}.pt") for c in configs}
    reference = runs.pop("no_shard:full:off")
    assert reference["grads"] and all(float(g.abs().max()) > 0 for g in reference["grads"].values())
    for config, run in runs.items():
        assert abs(run["loss"] - reference["loss"]) <= 1e-6, (config, run["loss"], reference["loss"])
        assert run["grads"].keys() == reference["grads"].keys(), config
        for name, grad in reference["grads"].items():
            torch.testing.assert_close(run["grads"][name], grad, rtol=0, atol=1e-6, msg=f"{config}: {name}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["llama", "gemma2-softcap-2", "cohere-tied-scale"])
def test_the_fused_kernel_gives_the_chunked_loss_on_a_gpu(batch, name):
    """``model.cross_entropy: fused`` (Liger Kernel) against the pure PyTorch chunks, on the GPU in fp32."""
    pytest.importorskip("liger_kernel", reason="liger-kernel is not installed (the fused-loss extra)")
    model_type, overrides = VARIANTS[name]
    model = _model(model_type, overrides).cuda()
    chunked = _step(model, batch, _choice(model), "cuda")
    got = _step(model, batch, loss.choose("fused", model.config.to_dict(), 2, 40, cuda=True), "cuda")
    assert abs(got[0] - chunked[0]) <= 1e-4, (got[0], chunked[0])
    for n, g in chunked[1].items():
        torch.testing.assert_close(got[1][n], g, rtol=1e-3, atol=1e-5, msg=n)
