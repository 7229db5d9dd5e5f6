"""The memory prediction's rule (``trainer.wire.fit``, ``fit_advice``), pure and table-driven: the state by
hand for known models, each setting moving the part it should, the verdict and what it suggests, ``auto``'s
choice, and the ``fit`` record as a node sends it (untrusted)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainer.wire.config import TrainerConfig
from trainer.wire.fit import GIB, Setup, lora_params, predict
from trainer.wire.fit_advice import Budget, choose_auto, chunk_of, need_bytes, setup_for, verdict
from trainer.wire.fit_record import FitSummary, MemoryCheck, memory_check
from trainer.wire.model_size import size_of
from trainer.wire.protocol import MetricRecord, RankMemory

LLAMA_8B = size_of({"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
                    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8})
H100 = Budget(int(79.6 * GIB), "H100")
GPU = Setup(world=16, nodes=2, device="cuda", sharding="full_shard", compute_bytes=2, batch=1, seq=4096)


def test_the_state_of_an_8b_model_by_hand():
    assert LLAMA_8B.total == 8_030_261_248  # Llama-3.1-8B's published count
    p = predict(LLAMA_8B, GPU)
    assert p.params == LLAMA_8B.total * 4 // 16  # fp32 master weights over 16 ranks
    assert p.optimizer == 2 * LLAMA_8B.total * 4 // 16  # two AdamW moments
    whole = predict(LLAMA_8B, replace(GPU, sharding="no_shard"))
    assert whole.params == LLAMA_8B.total * 4 and whole.optimizer == 8 * LLAMA_8B.total
    hybrid = predict(LLAMA_8B, replace(GPU, sharding="hybrid_shard", replicas=2))  # shards over a node's 8
    assert hybrid.params == LLAMA_8B.total * 4 // 8


@pytest.mark.parametrize(("change", "part", "smaller"), [
    ({"sharding": "no_shard"}, "peak", False),
    ({"sharding": "shard_grad_op"}, "gathered", False),
    ({"checkpointing": "full"}, "activations", True),
    ({"checkpointing": "selective"}, "activations", True),
    ({"logit_rows": 512}, "loss", True),
    ({"accumulation": 4}, "peak", False),  # the gradients held through the later micro-steps' forward
    ({"batch": 4}, "activations", False),
    ({"seq": 8192}, "activations", False),
    ({"attention": "eager"}, "activations", False),
    ({"masked": True}, "activations", False),
    ({"lora_rank": 16}, "optimizer", True),
    ({"lora_rank": 16, "quantized": True, "param_bytes": 2}, "params", True),
    ({"cpu_offload": True}, "params", True),
])
def test_each_setting_moves_its_part(change, part, smaller):
    before, after = predict(LLAMA_8B, GPU), predict(LLAMA_8B, replace(GPU, **change))
    was, now = getattr(before, part), getattr(after, part)
    assert (now < was) if smaller else (now > was), (part, was, now)


def test_offload_moves_the_state_to_the_host_and_lora_trains_only_its_adapters():
    off = predict(LLAMA_8B, replace(GPU, cpu_offload=True))
    assert off.params == off.optimizer == 0 and off.host == 16 * LLAMA_8B.total // 16  # weights, gradients, moments
    lora = replace(GPU, lora_rank=16, lora_targets=("q_proj", "v_proj"))
    adapters = lora_params(LLAMA_8B, lora)
    assert adapters == 32 * 16 * ((4096 + 4096) + (4096 + 1024))  # r x (inputs + outputs), two layers a block
    assert predict(LLAMA_8B, lora).trainable == adapters
    assert lora_params(LLAMA_8B, replace(lora, lora_targets="all-linear")) > adapters


def test_a_run_that_does_not_fit_names_what_would():
    no_shard = replace(GPU, world=8, nodes=1, sharding="no_shard", seq=8192)
    said = verdict(LLAMA_8B, no_shard, H100)
    assert said.fits is False and said.tries
    text = "\n".join(said.lines())
    assert "does not fit" in text and "fsdp.sharding: full_shard" in text and "activation_checkpointing: full" in text
    for line in said.tries:  # each suggestion, applied, fits
        assert "~" in line
    fitting = verdict(LLAMA_8B, replace(no_shard, sharding="full_shard", checkpointing="full"), H100)
    assert fitting.fits and "fits:" in fitting.lines()[1] and not fitting.tries
    unknown = verdict(LLAMA_8B, GPU, None)
    assert unknown.fits is None and "fsdp-tui doctor FILE" in unknown.lines()[1]


def test_one_change_that_fits_is_named_alone():
    seven = replace(GPU, world=8, nodes=1, sharding="shard_grad_op", seq=2048, checkpointing="full")
    said = verdict(LLAMA_8B, seven, Budget(40 * GIB, "A100 40GB"))
    assert not said.fits and said.tries[0].startswith("fsdp.sharding: full_shard (~")
    tiny = verdict(LLAMA_8B, replace(seven, sharding="full_shard", world=1), Budget(24 * GIB, "L4"))
    assert any("lora" in t or "cpu_offload" in t for t in tiny.tries) or "nothing" in "\n".join(tiny.lines())


def test_changes_together_name_each_setting_once():
    """Where no one change fits, the fewest together: a setting halved several times is named once, at
    the value that fits (never ``per_device_batch_size: 4 and per_device_batch_size: 2``)."""
    setup = replace(GPU, world=16, seq=2048, batch=8)
    said = verdict(LLAMA_8B, setup, Budget(22 * GIB, "L4"))
    assert not said.fits and len(said.tries) == 1, said.tries
    [together] = said.tries
    assert together.count("per_device_batch_size") == 1, together
    assert together.startswith("model.activation_checkpointing: full and model.cross_entropy: chunked and "
                               "per_device_batch_size: 2 (gradient_accumulation_steps x4 keeps the batch) (~"), together
    chunk = chunk_of(LLAMA_8B.vocab, "cuda")  # the loss in the trainer's chunks on a GPU
    applied = verdict(LLAMA_8B, replace(setup, checkpointing="full", batch=2, logit_rows=chunk), Budget(22 * GIB, "L4"))
    assert applied.fits, applied.lines()  # what it names, applied, fits


def test_auto_keeps_a_model_whole_while_it_fits():
    small = size_of({"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
                     "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4})  # ~1.1B
    setup = replace(GPU, world=8, nodes=1, seq=2048, sharding="no_shard")
    assert choose_auto(small, setup, H100.bytes) == "no_shard"
    assert choose_auto(LLAMA_8B, setup, H100.bytes) == "full_shard"
    assert choose_auto(LLAMA_8B, replace(setup, world=1), H100.bytes) == "no_shard"  # one rank: nothing to shard over
    assert need_bytes(predict(small, setup)) > predict(small, setup).peak  # the CUDA context and the slack


def test_the_trainer_s_settings_become_the_prediction_s():
    cfg = TrainerConfig.model_validate({
        "model_name": "m", "dataset_name": "d", "output_dir": "o", "max_seq_len": 512, "per_device_batch_size": 3,
        "model": {"activation_checkpointing": "selective", "dtype": "bfloat16"},
        "fsdp": {"cpu_offload": True, "reduce_dtype": "bf16"}, "lora": {"r": 4, "target_modules": ["q_proj"]}})
    s = setup_for(cfg, world=4, nodes=2, device="cuda", sharding="hybrid_shard", packing=True)
    assert (s.batch, s.seq, s.checkpointing, s.param_bytes, s.compute_bytes, s.reduce_bytes) == (3, 512, "selective", 2, 2, 2)
    assert (s.cpu_offload, s.lora_rank, s.lora_targets, s.replicas, s.shard_ranks, s.masked) == (
        True, 4, ("q_proj",), 2, 2, True)
    cpu = setup_for(cfg.model_copy(update={"model": cfg.model.model_copy(update={"dtype": "auto"})}), world=2,
                    nodes=1, device="cpu", sharding="no_shard", packing=True, per_example=True)
    assert (cpu.compute_bytes, cpu.param_bytes, cpu.masked) == (4, 4, False)


@pytest.mark.parametrize(("extra", "ok"), [
    ({}, True),
    ({"expected_gib": "lots"}, False),
    ({"expected_gib": float("nan")}, False),
    ({"device": "tpu"}, False),
    ({"sharding": "rm -rf /"}, False),
    ({"world": 0}, False),
    ({"world": True}, False),
    ({"parts": {"params": 1.0, "\x1b[31mred": 2.0, "activations": -1}}, True),
])
def test_the_fit_record_is_read_as_a_node_sends_it(extra, ok):
    good = FitSummary(expected_gib=0.6, need_gib=1.1, device="cuda", sharding="full_shard", world=16, memory_gib=79.6,
                      parts={"params": 0.2, "activations": 0.3})
    record = MetricRecord.from_json(MetricRecord(step=0, kind="fit", extra={**good.record().extra, **extra}).to_json())
    read = FitSummary.from_record(record)
    assert (read is not None) is ok
    if ok and "parts" in extra:
        assert read.parts == {"params": 1.0}  # a name with control characters, a negative size: dropped
    elif ok:
        assert read == good


def test_the_measured_peaks_beside_the_prediction():
    fit = FitSummary(expected_gib=0.62, need_gib=0.62, device="cpu", sharding="full_shard", world=2, memory_gib=11.8)
    records = [fit.record(),
               MetricRecord(step=1, memory=(RankMemory(0, rss_gib=0.5, peak_rss_gib=0.6),
                                            RankMemory(1, rss_gib=0.5, peak_rss_gib=0.71))),
               MetricRecord(step=2, memory=(RankMemory(0, rss_gib=0.5, peak_rss_gib=0.65),))]
    check = memory_check(records)
    assert check == MemoryCheck(fit, 0.71, 1, 2) and check.error == pytest.approx(0.71 / 0.62 - 1)
    assert "peak 0.71 GiB (rank 1 of 2) against 0.62 GiB predicted (+15%; full_shard)" in check.words()
    assert memory_check(records[1:]) is None  # a run that predicted nothing
    gpu = RankMemory(0, peak_gib=30.0, device_used_gib=40.0)
    assert gpu.measured_peak_gib == 30.0  # the tensors' peak, as the GPU's prediction counts it


def test_the_loss_term_follows_the_trainer_s_cross_entropy_setting():
    """The chunked cross-entropy holds one chunk's logits (the trainer's own rule, ``trainer.wire.cross_entropy``);
    the full logits, every position's. Needs a trainer with ``model.cross_entropy``."""
    rule = pytest.importorskip("trainer.wire.cross_entropy")
    base = {"model_name": "m", "dataset_name": "d", "output_dir": "o", "max_seq_len": 8192, "per_device_batch_size": 1}
    full = TrainerConfig.model_validate({**base, "model": {"cross_entropy": "full"}})
    chunked = TrainerConfig.model_validate({**base, "model": {"cross_entropy": "chunked"}})
    kw = {"world": 8, "nodes": 1, "device": "cuda", "sharding": "full_shard", "packing": True, "vocab": LLAMA_8B.vocab}
    assert setup_for(full, **kw).logit_rows is None
    assert setup_for(chunked, **kw).logit_rows == rule.chunk_rows(LLAMA_8B.vocab, True)
    assert predict(LLAMA_8B, setup_for(chunked, **kw)).loss < predict(LLAMA_8B, setup_for(full, **kw)).loss / 10
    tight = verdict(LLAMA_8B, setup_for(full, **kw), Budget(90 * GIB, "a 90 GiB card"))
    assert any(t.startswith("model.cross_entropy: chunked (~") for t in tight.tries), tight.tries
