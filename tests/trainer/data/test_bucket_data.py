"""Data in a bucket (a real S3-API server: moto's server mode, on loopback): a source named by its URL is
tokenized into the node's cache as the same file here would be, a second start reads the cache (keyed by
the object's tag), and it streams as the local file streams. A hub-style source through ``datasets``'
own streaming resumes from its ``state_dict``."""

from __future__ import annotations

import json

import pytest

from tests.support.s3_server import KEY, SECRET
from tests.support.trainer.run import source_of
from trainer.data.dataset import build
from trainer.data.position import DataPosition
from trainer.data.stream import StreamOrder
from trainer.wire.config import TrainerConfig
from trainer.wire.data_config import DataConfig

pytestmark = pytest.mark.slow

ROWS = [{"instruction": f"Say {i}.", "input": "", "output": " ".join(["word"] * (i % 17 + 1))} for i in range(400)]


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert all(bool((x[k] == y[k]).all()) for k in y)


def test_a_bucket_source_is_cached_and_streamed_as_the_same_file_here(tmp_path, tok, s3_server, monkeypatch):
    import boto3

    for name, value in (("AWS_ENDPOINT_URL", s3_server), ("AWS_ACCESS_KEY_ID", KEY), ("AWS_SECRET_ACCESS_KEY", SECRET),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    text = "".join(json.dumps(r) + "\n" for r in ROWS)
    client = boto3.client("s3", endpoint_url=s3_server)
    client.create_bucket(Bucket="data")
    client.put_object(Bucket="data", Key="sft/a.jsonl", Body=text.encode())
    (tmp_path / "a.jsonl").write_text(text)
    common = {"model_name": "m", "output_dir": "o", "max_seq_len": 48, "max_steps": 4}
    model = source_of(TrainerConfig(**common, dataset_name="d"))

    def cfg(name: str, **data) -> TrainerConfig:
        return TrainerConfig(**common, dataset_name=name, data={"cache_dir": str(tmp_path / "cache"), **data})

    here = build(cfg(str(tmp_path / "a.jsonl")), tok, packing=True, model_source=model)
    there = build(cfg("s3://data/sft/a.jsonl"), tok, packing=True, model_source=model)
    assert any("tokenized in" in n for n in there.notes), there.notes
    _same(there.train_rows, here.train_rows)
    _same(there.eval_rows, here.eval_rows)
    again = build(cfg("s3://data/sft/a.jsonl"), tok, packing=True, model_source=model)
    assert any("read from the cache" in n for n in again.notes), again.notes
    assert not [p for p in (tmp_path / "cache").rglob("source.jsonl")]  # the object's copy is not kept

    streamed = [build(cfg(name, streaming=True, eval_max_rows=20), tok, packing=True, model_source=model)
                for name in (str(tmp_path / "a.jsonl"), "s3://data/sft/a.jsonl")]
    orders = [StreamOrder(d.stream, 1, 0, 8) for d in streamed]
    for g in range(30):  # past a pass over the object: its rows again, in another order
        rows = [[d.train_rows[i] for i in o.indices(0, g)] for d, o in zip(streamed, orders, strict=True)]
        _same(rows[1], rows[0])
        for o in orders:
            o.note(DataPosition(position=g + 1, stream=""))
    with pytest.raises(Exception, match="no such object in the bucket"):
        build(cfg("s3://data/sft/none.jsonl"), tok, packing=True, model_source=model)


def test_a_source_streamed_by_datasets_resumes_from_its_state(tmp_path):
    from trainer.data.stream_sources import _Hub

    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    reader = _Hub("json", DataConfig(data_files=str(tmp_path / "a.jsonl")))  # datasets' own streaming reader
    first = reader.read(reader.start, 150)
    second = reader.read(first.after, 100)
    assert [r["instruction"] for r in first.rows.items] == [f"Say {i}." for i in range(150)]
    assert [r["instruction"] for r in second.rows.items] == [f"Say {i}." for i in range(150, 250)]
    assert second.rows.first == 150 and not second.ended
    again = _Hub("json", DataConfig(data_files=str(tmp_path / "a.jsonl"))).read(json.loads(json.dumps(first.after)), 100)
    assert again.rows.items == second.rows.items  # a new reader, from a checkpoint's position
    assert reader.read(second.after, 1000).ended
