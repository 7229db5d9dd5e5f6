"""Streaming, in one process without a model: the rows each rank trains on, step by step, from a stream
stopped at a checkpoint's position and started again (same and other world size) are the rows of an
unbroken stream, tensor for tensor; a streamed mixture keeps its shares; a bad row later in a stream is
named in one line; a streamed source is refused where it cannot stream. The trainer end to end:
tests/trainer/test_data_runs.py."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from tests.support.trainer.run import source_of
from trainer.data import stream
from trainer.data.dataset import build
from trainer.data.position import DataPosition
from trainer.data.stream import StreamOrder
from trainer.loop.state import TrainState
from trainer.loop.train import micro_batches
from trainer.wire.config import SettingError, TrainerConfig

WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _alpaca(path, count: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(count):
            f.write(json.dumps({"instruction": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))),
                                "input": "", "output": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 20))),
                                "id": i}) + "\n")


def _text(path, count: int, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    rows = [{"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 30)))} for _ in range(count)]
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=300)


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    _alpaca(root / "a.jsonl", 9000, 1)
    _text(root / "t.parquet", 5000, 2)
    return root


def _cfg(root, **over) -> TrainerConfig:
    params = {"model_name": "m", "output_dir": "o", "max_seq_len": 48, "max_steps": 10, "seed": 3,
              "datasets": [{"path": str(root / "a.jsonl"), "weight": 3}, {"path": str(root / "t.parquet"), "weight": 1}],
              "data": {"streaming": True, "eval_max_rows": 40, "cache_dir": str(root / "cache")}}
    params.update(over)
    return TrainerConfig(**params)


def _ranks(cfg, tok, world: int, batch: int, state: DataPosition | None = None):
    """Each rank's data and order, as every rank of a run of ``world`` makes them (each its own stream)."""
    out = []
    for rank in range(world):
        data = build(cfg, tok, packing=True, model_source=source_of(cfg))
        order = StreamOrder(data.stream, world, rank, batch)
        if state is not None:
            order.fit(state)
        out.append((data, order))
    return out


def _steps(ranks, state: DataPosition, steps: int, accum: int) -> list[list[dict[str, torch.Tensor]]]:
    """``steps`` optimiser steps: every rank's micro-batches, in rank order, and the state after them."""
    taken = []
    for _ in range(steps):
        per_rank, counts = [], set()
        for data, order in ranks:
            batches, epoch, position, count = micro_batches(order, data.train_rows, state.epoch, state.position,
                                                            accum, data.pad_id, data.learned_counts())
            per_rank.append(batches)
            counts.add(count)
        assert len(counts) == 1  # every rank counts the same global batch
        state.epoch, state.position = epoch, position
        for _, order in ranks:
            order.note(state)
        taken.append(per_rank)
    return taken


def _rows(step: list[list[dict[str, torch.Tensor]]]) -> list[list[int]]:
    """A step's rows over every rank, micro-batch by micro-batch, as token ids (padding dropped)."""
    out = []
    for micro in range(len(step[0])):
        for batches in step:
            batch = batches[micro]
            for row in range(batch["input_ids"].shape[0]):
                ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
                while ids and ids[-1] == 0 and labels[-1] == -100:  # the batch's padding (its width varies)
                    ids, labels = ids[:-1], labels[:-1]
                out.append(ids + labels)
    return out


@pytest.mark.parametrize(("before", "after", "workers"), [((2, 4), (2, 4), 0), ((2, 4), (1, 8), 0),
                                                      ((1, 8), (4, 2), 0), ((1, 8), (2, 4), 1)],
                         ids=["same-world", "two-ranks-to-one", "one-rank-to-four", "worker-process"])
def test_a_stream_stopped_and_started_again_trains_the_rows_an_unbroken_one_does(sources, tok, before, after,
                                                                                 workers, monkeypatch):
    if not workers:  # windows of 100 rows: the stop and the resume land windows into each source, and each
        # rank's reader runs 256 rows ahead, not a full window of 4,096 (a spawned worker reads the module's own)
        monkeypatch.setattr(stream, "WINDOW_ROWS", 100)
        monkeypatch.setattr(stream, "LOOKAHEAD_ROWS", 256)
    cfg = _cfg(sources, data={"streaming": True, "eval_max_rows": 40, "cache_dir": str(sources / "cache"),
                              "num_workers": workers})
    unbroken = _steps(_ranks(cfg, tok, *before), DataPosition(stream=""), 14, accum=2)
    state = TrainState.start(14, before[0] * before[1], streamed=True)
    first = _steps(_ranks(cfg, tok, *before), state.data, 6, accum=2)
    kept = json.loads(json.dumps(state.state_dict()))  # as a checkpoint keeps it
    assert kept["stream_rows"] == 6 * 2 * 8 and json.loads(kept["stream"])["slot"] == 96
    saved = TrainState.start(14, after[0] * after[1], streamed=True)
    saved.load_state_dict(kept)
    resumed = _ranks(cfg, tok, *after, state=saved.data)
    assert saved.data.position == 0 and saved.data.per_global == after[0] * after[1]
    rest = _steps(resumed, saved.data, 8, accum=2)
    assert [_rows(s) for s in first + rest] == [_rows(s) for s in unbroken]
    counts = resumed[0][1].source_counts(0, saved.data.position)
    assert sum(counts) == 14 * 16 and abs(counts[0] / sum(counts) - 0.75) < 0.05


def test_a_streamed_mixture_keeps_its_shares_and_each_source_passes_again(sources, tok):
    cfg = _cfg(sources, datasets=[{"path": str(sources / "a.jsonl"), "weight": 1},
                                  {"path": str(sources / "t.parquet"), "weight": 2, "name": "text"}],
               data={"streaming": True, "cache_dir": str(sources / "cache"), "eval_fraction": 0.0})
    data = build(cfg, tok, packing=False, model_source=source_of(cfg))
    order = StreamOrder(data.stream, 1, 0, 100)
    state = DataPosition(stream="")
    for position in range(1, 101):  # as the steps go: each one's rows dropped once taken
        state.position = position
        order.note(state)
    counts = np.array(order.source_counts(0, 100))
    assert counts.sum() == 10_000 and abs(counts[0] / 10_000 - 1 / 3) < 0.01
    assert counts[1] > 5000  # more than a pass over its 5,000 rows (one a row, none held out)
    assert json.loads(state.stream)["sources"][1][0] == 1  # the text source is in its second pass


@pytest.mark.parametrize("workers", [0, 1], ids=["thread", "worker-process"])
def test_a_bad_row_later_in_a_stream_is_named_in_one_line(tmp_path, tok, workers):
    path = tmp_path / "a.jsonl"
    _alpaca(path, 6000, 4)
    lines = path.read_bytes().split(b"\n")
    lines[5000] = b'{"instruction": "x", "input": ""}'
    path.write_bytes(b"\n".join(lines))
    cfg = TrainerConfig(model_name="m", output_dir="o", dataset_name=str(path), max_seq_len=48, max_steps=5,
                        data={"streaming": True, "eval_max_rows": 10, "shuffle": False, "num_workers": workers})
    data = build(cfg, tok, packing=False, model_source=source_of(cfg))
    with pytest.raises(SettingError) as err:
        for i in range(6000):
            data.train_rows[i]
            data.stream.release(i)
    assert str(err.value) == (f"{path}:5001: parameters.dataset_name: row has no 'output'; the alpaca format needs "
                              "instruction, output")


def test_a_stream_is_refused_where_it_cannot_stream(sources, tok):
    model = source_of(_cfg(sources))
    with pytest.raises(SettingError, match="parameters.max_steps: the data is streamed"):
        build(_cfg(sources, max_steps=None), tok, packing=True, model_source=model)
    with pytest.raises(SettingError, match="a streamed source takes a weight, not epochs"):
        build(_cfg(sources, datasets=[{"path": str(sources / "a.jsonl"), "epochs": 2}]), tok, packing=True,
              model_source=model)
    big = _cfg(sources, data={"streaming": "auto", "streaming_above_gb": 0.0001, "cache_dir": str(sources / "c")})
    data = build(big, tok, packing=True, model_source=model)
    assert data.stream is not None and any("over data.streaming_above_gb" in n for n in data.notes), data.notes


def test_a_small_streamed_source_holds_out_its_share_and_an_eval_split_is_its_own(tmp_path, tok):
    import datasets

    _alpaca(tmp_path / "small.jsonl", 100, 5)
    rows = [{"text": " ".join(WORDS[: i % 9 + 2])} for i in range(60)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:40]),
                          "test": datasets.Dataset.from_list(rows[40:])}).save_to_disk(str(tmp_path / "saved"))
    cfg = TrainerConfig(model_name="m", output_dir="o", max_seq_len=48, max_steps=2,
                        datasets=[{"path": str(tmp_path / "small.jsonl")},
                                  {"path": str(tmp_path / "saved"), "eval_split": "test"}],
                        data={"streaming": True})
    data = build(cfg, tok, packing=False, model_source=source_of(cfg))
    assert "its first 5 rows held out" in data.notes[0]  # 5% of its 100: the default 1,000 would be all of it
    assert "20 rows of its split 'test' held out" in data.notes[1]
    assert len(data.eval_rows) == 25
    order = StreamOrder(data.stream, 1, 0, 10)
    state = DataPosition(stream="")
    for position in range(1, 31):  # three passes over the small source: it has rows to train on
        state.position = position
        order.note(state)
    assert json.loads(state.stream)["sources"][0][0] >= 1


def _gone(pid: int, within: float = 20.0) -> bool:
    """Whether process ``pid`` has ended (or is a zombie) within ``within`` seconds, polled."""
    import os
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(") ", 1)[1][0] == "Z":
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.1)
    return os.path.exists(f"/proc/{pid}") is False


def test_a_stream_closed_ends_its_worker_process(sources, tok):
    import multiprocessing

    cfg = _cfg(sources, data={"streaming": True, "eval_max_rows": 10, "cache_dir": str(sources / "cache"),
                              "num_workers": 1})
    data = build(cfg, tok, packing=False, model_source=source_of(cfg))
    before = {p.pid for p in multiprocessing.active_children()}
    data.train_rows[0]
    workers = [p.pid for p in multiprocessing.active_children() if p.pid not in before and p.name == "data-stream"]
    assert len(workers) == 1
    data.stream.close()
    data.stream.thread.join(timeout=20)  # the reading thread stops, and the rows are no longer wanted
    assert _gone(workers[0]), "the stream's worker outlived the stream"


KILLED_PARENT = """
import json, multiprocessing, os, sys, time
from transformers import AutoTokenizer
from trainer.data import stream
from trainer.data.dataset import build
from trainer.model.source import ModelSource
from trainer.wire.config import TrainerConfig
root, model = sys.argv[1], sys.argv[2]
cfg = TrainerConfig(model_name="m", output_dir="o", max_seq_len=48, max_steps=10, seed=3,
                    datasets=[{"path": root + "/a.jsonl", "weight": 3}, {"path": root + "/t.parquet", "weight": 1}],
                    data={"streaming": True, "eval_max_rows": 10, "cache_dir": root + "/cache", "num_workers": 1})
data = build(cfg, AutoTokenizer.from_pretrained(model), packing=False, model_source=ModelSource.resolve("m"))
data.train_rows[0]
print(json.dumps([p.pid for p in multiprocessing.active_children() if p.name == "data-stream"]), flush=True)
time.sleep(600)
"""


def test_a_rank_killed_outright_takes_its_stream_worker_with_it(sources, tiny_model_dir):
    """A rank killed with SIGKILL runs no clean-up: its worker process sees it gone and ends by itself."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    rank = subprocess.Popen([sys.executable, "-c", KILLED_PARENT, str(sources), str(tiny_model_dir)],
                            stdout=subprocess.PIPE, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert rank.stdout is not None
        workers = json.loads(rank.stdout.readline())
        assert len(workers) == 1
    finally:
        rank.kill()
        rank.wait()
    assert _gone(workers[0]), "the killed rank's stream worker outlived it"
