"""Mixtures: a step's rows drawn from the sources in their weights' shares (within 1% over 10,000 rows),
the same rows on any world size, counted per source from the order itself; a mixture's sources built as
each alone would be; its settings refused in one line where they contradict. One process, no model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from tests.support.trainer.run import source_of
from trainer.data.mixture import Mix, MixedOrder
from trainer.wire.config import TrainerConfig
from trainer.wire.data_config import DataSource
from trainer.wire.protocol import DataSummary, MetricRecord, SourceSummary, mix_rows, mix_words


def _mix(weights, rows, epochs=None) -> Mix:
    sources = [DataSource(path=f"s{i}.jsonl", weight=w, epochs=None if epochs is None else epochs[i])
               for i, w in enumerate(weights)]
    return Mix.of(sources, rows)


def _global(order: MixedOrder, epoch: int, g: int) -> list[int]:
    return order.global_indices(epoch, g)


@pytest.mark.parametrize(("weights", "rows"), [
    ([0.5, 0.3, 0.2], [1000, 50, 7000]),      # a small source repeats, a large one is partly seen
    ([3, 1], [40_000, 40_000]),
    ([1, 1, 1, 1, 1], [10, 20, 30, 40, 12_000]),
    ([0.97, 0.03], [9000, 3000]),
])
@pytest.mark.parametrize("shuffle", [True, False])
def test_realised_shares_are_within_a_percent_of_the_weights_over_ten_thousand_rows(weights, rows, shuffle):
    order = MixedOrder(_mix(weights, rows), world=1, rank=0, batch=10, seed=5, shuffle=shuffle)
    shares = np.array(weights, dtype=float) / sum(weights)
    offsets = order.mix.offsets
    taken, epoch, g = [], 0, 0
    while len(taken) < 10_000:
        if g >= order.batches_per_epoch:
            epoch, g = epoch + 1, 0
        taken += _global(order, epoch, g)
        g += 1
    source = np.searchsorted(offsets, np.array(taken), side="right") - 1
    realised = np.bincount(source, minlength=len(rows)) / len(taken)
    assert np.abs(realised - shares).max() < 0.01, (realised, shares)
    # every prefix of a pass, too, at the step scale (the counts come from the order, not from a tally)
    for at in (1, 7, 100, order.batches_per_epoch):
        counts = np.array(order.source_counts(0, at))
        assert counts.sum() == at * 10
        within = source[: at * 10] if at * 10 <= len(source) else None
        if within is not None:
            assert counts.tolist() == np.bincount(within, minlength=len(rows)).tolist()
        assert np.abs(counts / counts.sum() - shares).max() <= 2.5 * len(rows) / (at * 10) + 1e-9


def test_the_rows_of_each_step_are_the_same_on_any_world_size_and_each_source_cycles_its_rows():
    mix = _mix([2, 1], [30, 500])
    one = MixedOrder(mix, 1, 0, 12, seed=3, shuffle=True)
    for world, batch in ((2, 6), (3, 4), (4, 3)):
        ranks = [MixedOrder(mix, world, r, batch, seed=3, shuffle=True) for r in range(world)]
        for epoch in (0, 1):
            for g in range(one.batches_per_epoch):
                assert [i for o in ranks for i in o.indices(epoch, g)] == one.indices(epoch, g)
    perm = one._perm(0) + one._perm(1)
    small = [i for i in perm if i < 30]
    assert sorted(small[:30]) == list(range(30)) and sorted(small[30:60]) == list(range(30))  # whole passes
    assert small[:30] != small[30:60]  # each pass in another order
    assert MixedOrder(mix, 1, 0, 12, seed=4, shuffle=True)._perm(0) != perm[: len(one._perm(0))]


def test_epoch_counts_set_each_sources_passes():
    mix = _mix([None, None], [100, 300], epochs=[3, 1])
    assert mix.epoch_rows == 600 and mix.shares == pytest.approx((0.5, 0.5))
    order = MixedOrder(mix, 1, 0, 10, seed=0, shuffle=True)
    perm = order._perm(0)
    assert sum(1 for i in perm if i < 100) == 300 and sorted(i for i in perm if i >= 100) == list(range(100, 400))


def test_a_mixture_is_refused_in_one_line_where_it_contradicts_itself():
    base = {"model_name": "m", "output_dir": "o"}
    for datasets, said in [
        ([{"path": "a.jsonl", "weight": 1}, {"path": "b.jsonl"}], "give every source a weight"),
        ([{"path": "a.jsonl", "weight": 1, "epochs": 2}], "give weight or epochs, not both"),
        ([{"path": "x/a.jsonl"}, {"path": "y/a.jsonl"}], "two sources are called a.jsonl: give one a name"),
        ([{"path": "a.jsonl", "weight": 0}], "greater than 0"),
    ]:
        with pytest.raises(ValidationError, match=said):
            TrainerConfig(**base, datasets=datasets)
    with pytest.raises(ValidationError, match="give dataset_name or datasets, not both"):
        TrainerConfig(**base, dataset_name="a.jsonl", datasets=[{"path": "b.jsonl"}])
    with pytest.raises(ValidationError, match="give dataset_name \\(one source\\) or datasets"):
        TrainerConfig(**base)
    cfg = TrainerConfig(**base, data={"format": "alpaca"},
                        datasets=[{"path": "org/chat-set", "format": "chat", "split": "sft"}, {"path": "s3://b/a.jsonl"}])
    chat, alpaca = (cfg.source_data(s) for s in cfg.sources())
    assert (chat.format, chat.split, alpaca.format, alpaca.split) == ("chat", "sft", "alpaca", "train")
    assert [s.label() for s in cfg.sources()] == ["org/chat-set", "a.jsonl"]


def test_a_mixtures_shares_travel_in_the_records_and_read_back_cleaned():
    summary = DataSummary(examples=30, eval_examples=2, format="mixed", max_seq_len=64, truncated=0,
                          truncated_tokens=0, sources=(SourceSummary("alpaca", "alpaca", 20, 10, 0.75),
                                                       SourceSummary("chat", "chat", 10, 5, 0.25)))
    back = DataSummary.from_record(MetricRecord.from_json(summary.record().to_json()))
    assert back == summary
    record = MetricRecord.from_json(json.dumps({"step": 4, "kind": "train", "mix_rows": [749, 251]}))
    assert mix_words(back.sources, mix_rows(record)) == "alpaca 74.9% (75%), chat 25.1% (25%)"
    hostile = {"step": 0, "kind": "data", "examples": 1, "eval_examples": 0, "format": "alpaca", "max_seq_len": 8,
               "truncated": 0, "truncated_tokens": 0,
               "sources": [{"name": "a\x1b[31m", "format": "alpaca", "examples": 1, "rows": 1, "share": 1.0},
                           {"name": "b", "format": "x y", "examples": 1, "rows": 1, "share": 1.0}, "junk"]}
    found = DataSummary.from_record(MetricRecord.from_dict(hostile))
    assert found is not None and [s.name for s in found.sources] == ["a?[31m"]
    assert mix_rows(MetricRecord.from_dict({"step": 1, "mix_rows": [1, -2]})) == ()


def test_a_mixture_builds_each_source_as_alone(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    from trainer.data.dataset import build

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    alpaca = [{"instruction": f"Say {i}.", "input": "", "output": " ".join(["word"] * (i % 9 + 1))}
              for i in range(120)]
    text = [{"text": " ".join(["two"] * (i % 13 + 1))} for i in range(80)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in alpaca))
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in text))
    common = {"model_name": "m", "output_dir": "o", "max_seq_len": 32,
              "data": {"cache_dir": str(tmp_path / "cache"), "eval_max_rows": 10}}
    model = source_of(TrainerConfig(**common, dataset_name="d"))
    mixed = build(TrainerConfig(**common, datasets=[{"path": str(tmp_path / "a.jsonl"), "weight": 3},
                                                    {"path": str(tmp_path / "t.jsonl"), "weight": 1}]), tok, True, model_source=model)
    assert mixed.mix is not None and mixed.mix.names == ("a.jsonl", "t.jsonl")
    assert [s.name for s in mixed.summary.sources] == ["a.jsonl", "t.jsonl"]
    # the cap shared out by weight: 7 and 2 of 10; the fraction holds out 6 of 120 and 4 of 80
    assert mixed.summary.format == "mixed" and len(mixed.eval_rows) == 6 + 2
    for i, name in enumerate(("a.jsonl", "t.jsonl")):
        alone = build(TrainerConfig(**{**common, "data": {**common["data"], "eval_max_rows": (7, 2)[i]}},
                                    dataset_name=str(tmp_path / name)), tok, True, model_source=model)
        start = int(mixed.train_rows.offsets[i])
        for k in range(len(alone.train_rows)):
            got, want = mixed.train_rows[start + k], alone.train_rows[k]
            assert all(bool((got[key] == want[key]).all()) for key in want)


def test_the_resume_check_compares_the_rows_taken_from_each_source():
    from dataclasses import replace

    from trainer.ckpt.resume_check import ResumeFacts, compare

    saved = ResumeFacts(run_id="r", step=6, total_steps=12, epoch=0, samples_in_epoch=96, batch_rows=16,
                        next_batch="aa", world_size=2, sharding="full_shard", lr=0.002, seed=1, data="d",
                        source_rows=(70, 26))
    same = replace(saved, losses=())
    check = compare(saved, same, None)
    assert check.verdict == "verified" and "rows from each source" in check.checked
    check = compare(saved, replace(same, source_rows=(71, 25)), None)
    assert check.verdict == "differs" and check.differs == ("rows from each source: 70, 26 in the checkpoint, 71, 25 "
                                                            "now",)
    # 3 ranks x 8: the position rounded down to 4 steps of 24 rows, 0 of 96 lost; 72 -> 3 steps: 24 lost
    check = compare(saved, replace(same, world_size=3, batch_rows=24, next_batch="zz", source_rows=(69, 27)), None)
    assert check.verdict == "resharded", check.words()
    assert ResumeFacts.from_meta({"resume": saved.to_dict()}) == saved
    assert ResumeFacts.from_meta({"resume": {**saved.to_dict(), "source_rows": [1, "x"]}}).source_rows == ()


@pytest.mark.parametrize("streaming", [False, True], ids=["cached", "streamed"])
def test_a_bad_source_of_a_mixture_is_named_in_one_line_by_its_key(tmp_path, tiny_model_dir, streaming):
    from transformers import AutoTokenizer

    from launcher.runs.core.triage import classify_line
    from trainer.data.dataset import build
    from trainer.wire.config import SettingError

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"instruction": "x", "output": "y"}) + "\n" for _ in range(9)))
    (tmp_path / "b.jsonl").write_text('{"instruction": "x", "output": "y"}\n{"instruction": "x", "outptu": "y"}\n')
    cfg = TrainerConfig(model_name="m", output_dir="o", max_steps=2,
                        datasets=[{"path": str(tmp_path / "a.jsonl")}, {"path": str(tmp_path / "b.jsonl")}],
                        data={"cache_dir": str(tmp_path / "cache"), "streaming": streaming, "eval_max_rows": 1})
    with pytest.raises(SettingError) as err:
        data = build(cfg, tok, packing=False, model_source=source_of(cfg))
        for i in range(40):  # a stream finds it when it reads that far
            data.train_rows[i]
    said = str(err.value)
    assert said == (f"{tmp_path}/b.jsonl:2: parameters.datasets[1].path: row has no 'output' (did you mean "
                    "'outptu'?); the alpaca format needs instruction, output")
    assert classify_line(said).kind == "data"
